"""Convert a GGUF checkpoint into a safetensors folder transformers loads fast.

Run as `python -m servediff.engines.hf_convert GGUF OUT_DIR` by the model
store. transformers refuses `save_pretrained` on a model it dequantised from
GGUF; dropping the quantizer and the quantization config first lets it save
fp32 weights that load in about two seconds and score bit for bit the same.
"""

from __future__ import annotations

import sys
from pathlib import Path


def convert(gguf: Path, out_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    setattr(model, "hf_quantizer", None)  # noqa: B010 - typed as a module attribute
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    # A GGUF tokenizer comes without a length limit (transformers' 1e30 stand-in), which
    # SGLang 0.5.17's /tokenize cannot serialise (HTTP 500): the model's context instead.
    if tokenizer.model_max_length > 1 << 40:
        context = getattr(model.config, "max_position_embeddings", None)
        if context:
            tokenizer.model_max_length = int(context)
    tokenizer.save_pretrained(out_dir)


if __name__ == "__main__":
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
