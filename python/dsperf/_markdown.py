"""Markdown tables for the command line: NaN cells (no price, no board power, an infeasible row, a
percentile with no finished request) are left empty rather than printed as nan; the text beside
each table says why a column is empty."""
from __future__ import annotations


def markdown(df, floatfmt: str = ".4g", index: bool = False) -> str:
    return df.astype(object).where(df.notna(), None).to_markdown(index=index, floatfmt=floatfmt, missingval="")
