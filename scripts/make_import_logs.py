"""Make the real lm-evaluation-harness and Inspect logs that ``tests/data/imports/`` ships, offline, once.

Two local models answer one local multiple-choice task (``tests/data/imports/task/items.jsonl``, 48 questions in
three categories, four options each):

- ``smollm2-135m-instruct``: the embedded SmolLM2-135M-Instruct, de-quantized into the suite's cache
  (``nbutils.engine.loading.embedded.load_embedded``);
- ``tiny-random-llama``: a 2-layer Llama with SmolLM2's tokenizer and random weights (seed 0), a model at chance.

lm-evaluation-harness (``lm_eval --model hf --log_samples``) runs the task as ``multiple_choice`` (each option's
log-likelihood) for both models, and a 6-question ``generate_until`` task for the tiny model (a log of generations);
Inspect (``inspect eval`` with its ``hf/`` provider, a few-shot ``multiple_choice()`` template and a ``pattern()``
scorer reading the answer letter) runs the same questions for both models and writes JSON logs; the second is
converted to Inspect's ``.eval`` format as well (``inspect log convert``). Everything runs on this machine's CPU with
the Hub switched off.

lm-eval and Inspect pin package versions the suite's own environment does not share (fsspec, python-dateutil), so
they live in their own virtual environment (``--tools``, made with ``pip install "lm_eval[hf]==0.4.13"
"inspect_ai==0.3.285" "torch==2.13.0+cpu" "transformers==5.24.0"``, the ``log-tools`` extra's tools at the versions
the shipped logs were made with); this script runs in the suite's environment::

    python scripts/make_import_logs.py --tools /tmp/lmeval-venv/bin       # about two minutes on two CPU cores

It writes only under ``tests/data/imports/`` (refusing to replace the shipped logs unless ``--overwrite``); the
models and the tools' caches live in a temporary folder that is removed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "imports"
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
COLOURS = {"grass": "green", "snow": "white", "the sky on a clear day": "blue", "a ripe banana": "yellow",
           "coal": "black", "a ripe tomato": "red", "an orange": "orange", "milk": "white"}
PALETTE = ["green", "white", "blue", "yellow", "black", "red", "orange", "purple"]


def questions(n_per: int = 16, seed: int = 0) -> list[dict]:
    """The task: arithmetic, days of the week and colours, four options each, gold at a random position."""
    rng = random.Random(seed)
    out = []

    def add(category, question, gold, wrong):
        options = [gold, *wrong]
        rng.shuffle(options)
        out.append({"id": f"{category}-{len(out) + 1:03d}", "category": category, "question": question,
                    "choices": options, "gold": options.index(gold), "answer": "ABCD"[options.index(gold)]})

    for _ in range(n_per):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        wrong = rng.sample([v for v in range(2, 19) if v != a + b], 3)
        add("arithmetic", f"What is {a} + {b}?", str(a + b), [str(v) for v in wrong])
    for i in range(n_per):
        d = DAYS[i % 7]
        nxt = DAYS[(i + 1) % 7]
        add("days", f"Which day comes after {d}?", nxt, rng.sample([x for x in DAYS if x not in (d, nxt)], 3))
    things = list(COLOURS.items())
    for i in range(n_per):
        thing, colour = things[i % len(things)]
        add("colours", f"What colour is {thing}?", colour, rng.sample([c for c in PALETTE if c != colour], 3))
    return out


LMEVAL_MC = """task: probe_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: gold
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""
LMEVAL_GEN = """task: probe_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{choices[gold]}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 6
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: true
"""
INSPECT_TASK = '''from inspect_ai import Task, task
from inspect_ai.dataset import FieldSpec, json_dataset
from inspect_ai.scorer import pattern
from inspect_ai.solver import multiple_choice

TEMPLATE = """Answer with the letter of the correct option, as in the examples.

Question: What is 1 + 1?
A) 3
B) 2
C) 5
ANSWER: B

Question: What colour is coal?
A) white
B) green
C) black
D) red
ANSWER: C

Question: {{question}}
{{choices}}
"""


@task
def probe_mc():
    # a model this small answers "C) 6" rather than "ANSWER: C", which the choice() scorer does not read: the letter at
    # the start of the answer is read by a pattern() scorer instead
    return Task(dataset=json_dataset({data!r}, FieldSpec(input="question", target="answer", choices="choices",
                                                          id="id", metadata=["category"])),
                solver=multiple_choice(template=TEMPLATE), scorer=pattern(r"^\\W*(?:ANSWER\\s*:\\s*)?([A-D])\\b",
                                                                           ignore_case=False))
'''


def make_models(work: Path) -> dict[str, Path]:
    """The two local model folders: the embedded SmolLM2-135M-Instruct (its de-quantized cache) and a tiny random Llama."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(ROOT))
    from nbutils.engine.loading.embedded import load_embedded

    model, tok, meta = load_embedded("smollm2-135m-instruct", torch.float32)
    del model
    from nbutils.engine.loading.embedded import cache_dir

    smol = cache_dir() / meta["dequantized_cache"]
    config = AutoConfig.from_pretrained(smol)
    config.update({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                   "num_key_value_heads": 2, "head_dim": 32})
    torch.manual_seed(0)
    tiny = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    folder = work / "tiny-random-llama"
    tiny.save_pretrained(folder)
    AutoTokenizer.from_pretrained(smol).save_pretrained(folder)
    link = work / "smollm2-135m-instruct"
    link.symlink_to(smol, target_is_directory=True)  # the folder name becomes the model's name in both tools' logs
    return {"smollm2-135m-instruct": link, "tiny-random-llama": folder}


def run(cmd: list[str], env: dict, cwd: Path) -> None:
    print("$", " ".join(map(str, cmd)), flush=True)
    subprocess.run(list(map(str, cmd)), env=env, cwd=cwd, check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", required=True, help="the bin/ folder of the environment holding lm_eval and inspect")
    ap.add_argument("--overwrite", action="store_true", help="replace the shipped logs")
    args = ap.parse_args(argv)
    tools = Path(args.tools)
    if OUT.exists() and any(OUT.iterdir()) and not args.overwrite:
        print(f"error: {OUT} already holds logs; pass --overwrite to make them again", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="import-logs-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "HF_HOME": str(work / "hf"), "INSPECT_LOG_DIR": str(work / "inspect"), "TOKENIZERS_PARALLELISM": "false",
               "PYTHONHASHSEED": "0", "NO_COLOR": "1"}
        env.pop("PYTHONPATH", None)
        staged = work / "out"
        (staged / "task").mkdir(parents=True)
        items = questions()
        data = staged / "task" / "items.jsonl"
        data.write_text("".join(json.dumps(q) + "\n" for q in items), encoding="utf-8")
        gen = work / "gen.jsonl"
        gen.write_text("".join(json.dumps(q) + "\n" for q in items[::8]), encoding="utf-8")
        tasks = work / "tasks"
        tasks.mkdir()
        (tasks / "probe_mc.yaml").write_text(LMEVAL_MC.format(data=data), encoding="utf-8")
        (tasks / "probe_gen.yaml").write_text(LMEVAL_GEN.format(data=gen), encoding="utf-8")
        shutil.copy(tasks / "probe_mc.yaml", staged / "task" / "probe_mc.yaml")
        (work / "inspect_task.py").write_text(INSPECT_TASK.format(data=str(data)), encoding="utf-8")
        models = make_models(work)
        for name, folder in models.items():
            run([tools / "lm_eval", "--model", "hf", "--model_args", f"pretrained={folder},dtype=float32",
                 "--tasks", "probe_mc" + (",probe_gen" if name == "tiny-random-llama" else ""),
                 "--include_path", tasks, "--device", "cpu", "--batch_size", "8", "--seed", "0",
                 "--output_path", staged / "lm-eval", "--log_samples"], env, work)
            run([tools / "inspect", "eval", "inspect_task.py", "--model", f"hf/{name}", "-M",
                 f"model_path={folder}", "-M", "device=cpu", "-M", "do_sample=false", "-M", "batch_size=8",
                 "--max-tokens", "8", "--seed", "0", "--log-format", "json", "--log-dir", staged / "inspect",
                 "--no-log-realtime", "--display", "plain"], env, work)
        last = sorted((staged / "inspect").glob("*.json"))[-1]  # one log in Inspect's own .eval format too
        run([tools / "inspect", "log", "convert", last, "--to", "eval", "--output-dir", staged / "inspect-eval"], env,
            work)
        for name in models:  # lm-eval names each model's folder after its whole path: the model's name is enough
            for folder in (staged / "lm-eval").glob(f"*{name}"):
                folder.rename(folder.with_name(name))
        (staged / "README.md").write_text(
            "Generated by `python scripts/make_import_logs.py` (see its docstring): real lm-evaluation-harness "
            "`--log_samples` files and Inspect JSON logs of two local models on `task/items.jsonl`. Do not edit; "
            "make them again with that script.\n", encoding="utf-8")
        if OUT.exists():
            shutil.rmtree(OUT)
        shutil.copytree(staged, OUT)
    for p in sorted(OUT.rglob("*")):
        if p.is_file():
            print(f"{p.relative_to(ROOT)}  {p.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
