"""The scrubber against vectors of every category: what must go, and what must stay."""

from __future__ import annotations

import pytest

from servediff.scrub import scrub

# (input, what must not survive, the placeholder or kept text that must appear)
REMOVED = [
    # hostnames
    ("ssh into gpu-node-3.internal.example.com", "gpu-node-3", "HOST"),
    ("engine up on gpu-node-3:8000", "gpu-node-3", "HOST:8000"),
    ("listening on [dgx-a100-07]:30000", "dgx-a100-07", "[HOST]:30000"),
    ("ssh ubuntu@ip-172-31-1-2 'nvidia-smi'", "ip-172-31-1-2", "USER@HOST"),
    ("scp run.tgz deploy@buildbox:/srv", "buildbox", "USER@HOST"),
    ("hostname=trainer-12", "trainer-12", "hostname=HOST"),
    ("worker node.cluster.local joined", "node.cluster.local", "HOST"),
    # IPv4 and IPv6
    ("curl http://10.0.0.12:8000/v1/completions", "10.0.0.12", "http://HOST:8000/v1/completions"),
    ("peer 192.168.1.254 refused", "192.168.1.254", "HOST"),
    ("NCCL INFO Bootstrap : Using eth0:172.16.5.20<0>", "172.16.5.20", "HOST"),
    ("bound to [2001:db8::8a2e:370:7334]:8080", "2001:db8", "[HOST]:8080"),
    ("fe80::1ff:fe23:4567:890a%eth0 is up", "fe80::1ff", "HOST"),
    ("loopback ::1 answered", "::1", "HOST"),
    # paths
    ("--model /data/models/llama-3-8b", "/data/models", "--model /PATH/..."),
    ("cache at /mnt/nvme0/hf/hub", "/mnt/nvme0", "/PATH/..."),
    ("cd /workspace/alice/project && run", "/workspace/alice", "/PATH/..."),
    ("weights in ~/ckpt/run1/model.safetensors", "~/ckpt", "/PATH/..."),
    ("log /home/bob/.cache/servediff/engines/vllm.log", "/home/bob", "/PATH/..."),
    ("C:\\Users\\carol\\models\\gguf\\model.gguf loaded", "carol", "/PATH/..."),
    ("share \\\\fileserver\\models\\llama", "fileserver", "/PATH/..."),
    ("a/b: open('/etc/ssl/private/key.pem')", "/etc/ssl", "/PATH/..."),
    # users and e-mail
    ("contact alice.smith@example.com for access", "alice.smith", "EMAIL"),
    ("USER=alice ran it", "alice", "USER=USER"),
    ("--user dave --port 8000", "dave", "--user USER"),
    # tokens and keys
    ("Authorization: Bearer abcdef1234567890abcdef", "abcdef1234567890", "REDACTED"),
    ("-H 'authorization: Basic dXNlcjpwYXNz'", "dXNlcjpwYXNz", "REDACTED"),
    ("token is Bearer eyXzzyy.qqq-rrr_sss", "eyXzzyy", "Bearer REDACTED"),
    ("Cookie: session=abcdef123456; theme=dark", "abcdef123456", "Cookie: REDACTED"),
    ("export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123", "hf_abcdefghij", "REDACTED"),
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx1234", "sk-proj-abcdef", "REDACTED"),
    ("git clone https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r",
     "ghp_abcdef", "REDACTED"),
    ("pat github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "github_pat_11", "REDACTED"),
    ("aws AKIAIOSFODNN7EXAMPLE key", "AKIAIOSFODNN7EXAMPLE", "REDACTED"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0T",
     "eyJhbGciOiJIUzI1NiJ9", "REDACTED"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq\n-----END RSA PRIVATE KEY-----",
     "MIIEowIBAAKCAQEAq", "REDACTED-PRIVATE-KEY"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n"
     "-----END OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAA", "REDACTED-PRIVATE-KEY"),
    ("password=hunter2", "hunter2", "password=REDACTED"),
    ("db_password: 'correct horse'", "correct horse", "db_password: 'REDACTED'"),
    ('secret="s3cr3t value"', "s3cr3t value", 'secret="REDACTED"'),
    ("api_key = abc-123-def", "abc-123-def", "api_key = REDACTED"),
    ("--api-key mykey123 --port 8000", "mykey123", "--api-key REDACTED --port 8000"),
    ('{"api_key": "abcd1234", "model": "m"}', "abcd1234", '{"api_key": "REDACTED", "model": "m"}'),
    ('{"auth_token": "tok-999", "n": 1}', "tok-999", '"auth_token": "REDACTED"'),
    ("postgres://admin:pa55word@db:5432/runs", "pa55word", "postgres://REDACTED@"),
    ("blob aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zQ8", "aB3dE5fG7hJ9", "REDACTED"),
    ('x = "aGVsbG8gd29ybGQgdGhpcyBpcyBhIHNlY3JldA=="', "aGVsbG8gd29y", '"REDACTED"'),
    # private hosts inside URLs, in log prefixes, before a port; cloud instance names
    ("dashboard https://grafana.mycorp.net/d/abc?orgId=1", "mycorp", "https://HOST/d/abc"),
    ("see http://metrics.internal:3000/graph", "metrics.internal", "http://HOST:3000/graph"),
    ("ws://inference.acme-labs.xyz/stream", "acme-labs", "ws://HOST/stream"),
    ("Nov 30 12:00:01 gpu-node-3 vllm[1234]: ready", "gpu-node-3", "12:00:01 HOST vllm[1234]"),
    ("2026-11-30T12:00:01Z trainer07 kernel: NVRM: Xid 79", "trainer07", "Z HOST kernel:"),
    ("api.mycompany.ai:443 answered", "mycompany", "HOST:443"),
    ("worker ip-172-31-1-2.ec2.internal joined", "ip-172-31", "worker HOST joined"),
    # buckets, containers, accounts and private repositories
    ("s3://acme-private-weights/llama/model.safetensors", "acme-private",
     "s3://BUCKET/.../model.safetensors"),
    ("gs://team-bucket/ckpt/run3/config.json", "team-bucket", "gs://BUCKET/.../config.json"),
    ("az://evalcontainer/runs/42/notes.txt", "evalcontainer", "az://BUCKET/..."),
    ("abfss://ckpts@acmestore.dfs.core.windows.net/run1/model.safetensors", "acmestore",
     "abfss://BUCKET.dfs.core.windows.net/.../model.safetensors"),
    ("https://mybucket.s3.amazonaws.com/models/m.gguf", "mybucket",
     "https://BUCKET.s3.amazonaws.com/.../m.gguf"),
    ("https://storage.googleapis.com/team-b/a/b/tokenizer.json", "team-b",
     "https://storage.googleapis.com/BUCKET/.../tokenizer.json"),
    ("hf://datasets/acme/private-evals/data.parquet", "private-evals", "hf://datasets/REPO/..."),
    # paths: the private part goes, the model, weights or config file stays
    ("--model /home/alice/models/Qwen2.5-7B-Instruct-AWQ", "alice",
     "--model /PATH/.../Qwen2.5-7B-Instruct-AWQ"),
    ("loaded /mnt/nvme1/bob/ckpt/model-00001-of-00002.safetensors", "nvme1",
     "/PATH/.../model-00001-of-00002.safetensors"),
    ("gguf ~/weights/SmolLM2-135M-Instruct.Q4_1.gguf", "weights",
     "/PATH/.../SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("D:\\Models\\dave\\mistral-7b-v0.3\\config.json", "dave", "/PATH/.../config.json"),
    ("notes in /home/erin/private/diary", "erin", "in /PATH/..."),
    # a key=value secret keeps its key
    ("HMAC_KEY=aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1x", "aB3dE5fG7hJ9", "HMAC_KEY=REDACTED"),
    ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI",
     "AWS_SECRET_ACCESS_KEY=REDACTED"),
    # Unicode look-alikes are folded before matching
    ("key ѕk-proj-abcdefghijklmnopqrstuvwx1234", "abcdefghijklmnop", "REDACTED"),
    ("token ｈｆ_abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnop", "REDACTED"),
]

KEPT = [
    "meta-llama/Meta-Llama-3.1-8B-Instruct",
    "HuggingFaceTB/SmolLM2-135M revision 93efa2f097d58c2a74874c7e644dbc9b0cee75a2",
    "Qwen/Qwen2.5-7B-Instruct-AWQ",
    "vllm 0.32.0, torch 2.11.0+cu130, transformers 5.17.0",
    "llama.cpp build b4567 (commit 1a2b3c4)",
    "image vllm/vllm-openai:v0.6.3.post1",
    "image lmsysorg/sglang:v0.4.6-cu124",
    "--enforce-eager --max-model-len 8192 --gpu-memory-utilization 0.9",
    "--max-num-batched-tokens 8192 --max-num-seqs 256",
    "-np 4 -c 8192 --cache-type-k q8_0",
    "served on HOST:8000 after 3.2 s",
    "at 2026-11-30T12:28:10Z (12:28:10.123 UTC)",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "version 1.2.3.4 of the driver, nccl 2.21.5.1",
    "POST /v1/completions: HTTP 400: prompt too long",
    "GET /health and /metrics answered",
    '{"prompt": [1, 2, 3], "max_tokens": 16, "temperature": 0.0, "logprobs": 1}',
    '{"kv_tokens": 23296, "max_concurrency": 11.38, "cached_tokens": 0}',
    "decode 40.3 tok/s, prefill 850.7 tok/s, TTFT 0.150 s",
    "moved 23 of 43 texts (max |dNLL| 8.81)",
    "KV pool: `pinned` 93,574 vs `stock` 324,186 tokens (-71%)",
    "CUDA error: an illegal memory access was encountered",
    "torch.compile(mode='max-autotune') vs eager",
    "prompt_logprobs entry 0 is null; tokens 2..N scored",
    "GPU 0: NVIDIA H200, driver 580.82.07, CUDA 13.0",
    "the ratio is 1/2 and the speed 3.5 tok/s",
    "Die Wettervorhersage für morgen: Regen in Köln.",
    "Привет, мир: это проверка.",
    "日本語のテキストはそのまま残る。",
    "max_tokens=16 and cache_prompt=false",
    # public hosts reports cite, with their paths
    "see https://arxiv.org/abs/2408.12345 and https://docs.vllm.ai/en/latest/serving/",
    "git clone https://github.com/ggml-org/llama.cpp && pip download from pypi.org",
    "weights https://huggingface.co/HuggingFaceTB/SmolLM2-135M/blob/main/model.safetensors",
    "docs at https://docs.nvidia.com/deploy/nvml-api/ and https://pytorch.org/docs/stable/",
    # look-alikes of buckets, paths and key=value secrets that are not private
    "s3 and gs are object stores; a bucket of texts; hf is short for Hugging Face",
    "routes /v1/completions, /tokenize and /metrics",
    "ratio 3/4, loads 1/2 and 2/2",
    "max_model_len=2048 top_k=1 HMAC_KEY_LENGTH=32",
    "model.safetensors and config.json as a file name alone",
    "Nov 30 12:00:01 the run started",
]


@pytest.mark.parametrize(("text", "gone", "shown"), REMOVED)
def test_private_things_are_removed(text: str, gone: str, shown: str):
    out = scrub(text)
    assert gone not in out.text, out.text
    assert shown in out.text, out.text
    assert sum(out.counts.values()) >= 1


@pytest.mark.parametrize("text", KEPT)
def test_public_things_are_kept(text: str):
    out = scrub(text)
    assert out.text == text, out.text
    assert not out.counts


def test_vector_set_covers_enough():
    assert len(REMOVED) + len(KEPT) >= 60
    assert len(KEPT) * 2 >= 60 // 2


@pytest.mark.parametrize(("text", "gone", "shown"), REMOVED)
def test_a_second_pass_over_scrubbed_text_changes_nothing(text: str, gone: str, shown: str):
    once = scrub(text)
    again = scrub(once.text)
    assert again.text == once.text and not again.counts, (once.text, again.text)


def test_the_counts_name_each_category():
    out = scrub("s3://acme-w/x/model.gguf on https://grafana.corp.example.net/x by "
                "/home/alice/notes with HMAC_KEY=aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1x and "
                "hf://acme/secret-model/config.json")
    assert out.counts == {"bucket": 1, "path": 3, "hostname": 1, "high-entropy string": 1,
                          "repository": 1}


def test_a_plan_or_the_cli_adds_allowed_and_denied_hosts():
    from servediff.scrub import policy

    text = "mirror https://models.mycorp.net/x and node bastion answered"
    assert "models.mycorp.net" not in scrub(text).text
    rules = policy(allow=["mycorp.net"], deny=["bastion"])
    out = scrub(text, rules)
    assert "https://models.mycorp.net/x" in out.text and "bastion" not in out.text
    assert scrub("see https://github.com/o/r", policy(deny=["github.com"])).text == \
        "see https://HOST/o/r"


def test_counts_name_the_kinds():
    out = scrub("ssh root@buildbox; /data/x; token=abc12345 and 10.1.2.3")
    assert out.counts == {"user@host": 1, "path": 1, "secret assignment": 1,
                          "ipv4 address": 1}
    assert out.summary() == ("1 ipv4 address, 1 path, 1 secret assignment, 1 user@host")


def test_counts_of_tokens_are_not_secrets():
    text = "TTFT at 512 prompt tokens: `eager` 0.788; prompt_tokens=512; token_ids: [1, 2]"
    assert scrub(text).text == text


def test_a_second_pass_counts_nothing_new():
    once = scrub("ssh root@buildbox; /data/x; token=abc12345 and 10.1.2.3")
    twice = scrub(once.text)
    assert twice.text == once.text and not twice.counts
