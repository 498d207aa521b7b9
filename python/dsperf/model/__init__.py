"""dsperf.model: what is modelled and how it is priced.

configs     model architectures (Hugging Face config.json -> ModelConfig)
devices     device specs (TOML -> DeviceSpec)
seed        the seed analysis' prefill/decode model, as published and corrected
tables      the seed's tables; deviations: each correction's effect; compare: beside DeepSeek's figures
grounded    the grounded model: a step as priced kernel calls over measured efficiency tables
validation  the grounded model against published deployments (`dsperf validate`)
inputs      every number the model reads, with its source, and the guard that none is a published figure
explore     the deployment explorer (`dsperf explore`)
"""
from .configs import (HF_FIELDS, MODEL_FIELD_MAX, ModelConfig, from_hf_config, list_models, load_model,  # noqa: F401
                      model_summary, read_config_json)
