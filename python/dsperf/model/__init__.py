"""dsperf.model: what is modelled, and the grounded model that prices it (the seed analysis' own
formulas and tables live in dsperf.seed).

configs     model architectures (Hugging Face config.json -> ModelConfig)
devices     device specs (TOML -> DeviceSpec)
api         dsperf.prefill / decode / decode_sweep: either model by mode
grounded    the grounded model: a step as priced kernel calls over measured efficiency tables
validation  the grounded model against published deployments (`dsperf validate`)
inputs      every number the model reads, with its source, and the guard that none is a published figure
explore     the deployment explorer (`dsperf explore`)
"""
from .configs import (HF_FIELDS, MODEL_FIELD_MAX, ModelConfig, from_hf_config, list_models, load_model,  # noqa: F401
                      model_summary, read_config_json)
