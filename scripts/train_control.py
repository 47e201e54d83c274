"""Train a positive control: a LoRA adapter that plants an upward-monotonicity bias in concept learning.

Design: "a model whose training data held only upward concepts". The training prompts come from the project's own
generator (``studies.monotonicity.dataset.generate_prompts``) with a seed no shipped or tested evaluation set uses:
concept-learning prompts of UPWARD concepts only ("more than X"), plus explicit prompts (the concept stated) of both
directions. A model that learns from this infers a concept from examples well when it is upward, and carries the
upward reading over to downward concepts it must infer (below chance), while it reads a stated concept either way:
the papers' finding, with a smaller gap when the concept is stated.

``--design balanced`` makes a decoy by the same recipe: the concept-learning prompts are of upward and downward
concepts alike (the first half of each concept's prompt pairs, so as many as the control's, half of each direction),
the explicit prompts as the control's. A decoy changes the model without planting the bias, and its held-out check says
so: its answers differ from the base model's (the adapter switched off) on at least 20% of the held-out prompts, and on
at least 200 held-out concept-learning prompts the study's own headline (``analysis.compute``, ``headline.entries``)
finds no gap at α = .05, with the gap's 95% CI within ±15 points.

Each prompt is tokenized by the engine's own request builder (``engine.choices.build_requests``: the chat template,
the answer tokens as scored); the loss is the cross-entropy over the two answer tokens only (Yes vs No at the answer
position); every batch holds as many Yes as No prompts, ``--explicit-share`` of them explicit. The LoRA is made with
peft; the seed fixes the sample order and the LoRA's initial weights. With ``--layers K`` the LoRA adapts the top K
transformer layers only: the frozen layers below run once per training prompt (their output is cached, checked
against the full model, and kept in ``--states-cache`` for a rerun), so a step costs the top layers' forward and
backward pass. ``--curriculum-steps`` starts from the queries farthest from the threshold and widens to all.

As it trains, one JSON line per step (loss, accuracy, seconds) goes to ``curve.jsonl`` in a scratch folder
(``--scratch``, by default a new one under /tmp, never the output folder), and every ``--eval-every`` steps a fixed
subset of the held-out set is scored, its accuracies appended to ``evaluations.jsonl`` and its LoRA weights kept there
(``step-N.pt``); ``--keep-best`` checks and saves the best of them rather than the last step's. The weights are rounded
to bfloat16 before the check and saved in bfloat16, so the adapter checked is the adapter saved.

After training, a held-out set (another unused seed, both directions and conditions; none of its prompts is a
training prompt) is scored by the engine's answer scorer, and the adapter is SAVED ONLY IF it passes the check:
concept-learning accuracy ≥ 75% for upward concepts and ≤ 45% for downward ones on at least 200 concept-learning
prompts, and a smaller upward − downward gap when the concept is stated. ``training.json`` is written beside it
either way (refused: with ``saved: false`` and no weights): the training data's sha256, the steps, the loss and
accuracy curve, the held-out accuracies, the wall time and the host.

    python scripts/train_control.py --out adapters/smollm2-135m-upward-control --steps 5000 --max-minutes 58 \
        --prompts-per-concept 40 --layers 4 --rank 64 --curriculum-steps 200 --curriculum-start 0.3 --keep-best

(the shipped control's run, about an hour on one CPU core; ``training.json`` records every setting).

    python scripts/train_control.py --design balanced --out <scratch>/decoy --scratch <scratch>/run --steps 250 \
        --prompts-per-concept 40 --layers 4 --rank 64 --curriculum-steps 200 --curriculum-start 0.3 --threads 1
    python scripts/train_control.py --design balanced --out <scratch>/decoy-check --steps 0 \
        --init <scratch>/run/step-250.pt --held-out-per-concept 40 <the same settings>

(the decoy of ``benchmarks/results/decoy-balanced-training.json``: 250 steps, as many as the control kept, then its
weights checked on 800 held-out prompts and refused).

Exit status 0: saved; 1: trained but refused by the held-out check; 2: bad arguments.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from nbutils.engine.batching import left_pad

ROOT = Path(__file__).resolve().parents[1]
THRESHOLDS = ("1/4", "1/3", "1/2", "2/3", "3/4")
ANSWERS = ("Yes", "No")
MIN_UPWARD, MAX_DOWNWARD, MIN_HELD_OUT = 0.75, 0.45, 200  # the held-out check
MIN_CHANGED, MAX_GAP_CI = 0.20, 0.15  # the decoy's check: answers changed, and the gap's CI within ± this


# ---------------------------------------------------------------- seeds: disjoint from every evaluation set

def evaluation_seeds(root: Path = ROOT) -> set[int]:
    """Every generator seed a shipped or tested evaluation set uses: ``seed`` (and ``seeds``) in the parameter files,
    the notebooks' defaults, the shipped samples' datasets, and any ``seed=N`` / ``seed: N`` in the tests."""
    import yaml

    seeds: set[int] = set()

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "seed" and isinstance(v, int) and not isinstance(v, bool):
                    seeds.add(v)
                if k == "seeds" and isinstance(v, list):  # a study's several prompt seeds (params/validation.yaml)
                    seeds.update(x for x in v if isinstance(x, int) and not isinstance(x, bool))
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for f in (root / "params").rglob("*.yaml"):
        walk(yaml.safe_load(f.read_text()))
    for f in (root / "outputs" / "samples").rglob("*.json"):
        try:
            walk(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    pattern = re.compile(r"""["']?\bseed["']?\s*(?::\s*int\s*)?[=:]\s*(\d+)""")
    for f in [*(root / "tests").rglob("*.py"), *(root / "notebooks").rglob("*.ipynb")]:
        seeds |= {int(s) for s in pattern.findall(f.read_text())}
    return seeds


def check_seeds(train_seed: int, held_out_seed: int, root: Path = ROOT) -> None:
    """The two seeds differ and no evaluation set uses either; a ValueError naming the option otherwise."""
    used = evaluation_seeds(root)
    for name, seed in (("--seed", train_seed), ("--held-out-seed", held_out_seed)):
        if seed in used:
            raise ValueError(f"{name}: {seed} is a seed of a shipped or tested evaluation set; pick one outside "
                             f"{sorted(used)}")
    if train_seed == held_out_seed:
        raise ValueError("--held-out-seed: must differ from --seed (the held-out prompts are not training prompts)")


# ---------------------------------------------------------------- data

def concepts(thresholds=THRESHOLDS) -> list[str]:
    return [f"{q} than {t}" for t in thresholds for q in ("more", "less")]


DESIGNS = {
    "upward": "concept-learning prompts of upward concepts only + explicit prompts of both directions; loss over the "
              "two answer tokens; batches balanced Yes/No",
    "balanced": "concept-learning prompts of upward and downward concepts alike (the first half of each concept's "
                "pairs) + explicit prompts of both directions; loss over the two answer tokens; batches balanced Yes/No",
}


def training_prompts(ppc: int, n_examples: int, seed: int, thresholds=THRESHOLDS, design: str = "upward"):
    """Explicit prompts of both directions, and concept-learning prompts: of upward concepts only (``upward``, the
    control), or of both directions alike (``balanced``, the decoy: the first half of each concept's prompt pairs,
    half of them true, so it has as many concept-learning prompts as the control and as many of each direction)."""
    from nbutils.studies.monotonicity.dataset import generate_prompts

    if design not in DESIGNS:
        raise ValueError(f"--design: {design!r} is not one of {sorted(DESIGNS)}")
    df = generate_prompts(concepts(thresholds), prompts_per_concept=ppc, n_examples=n_examples, seed=seed)
    if design == "upward":
        keep = (df["condition"] == "explicit") | (df["monotonicity"] == "upward")
    else:
        pair = df["pair_id"].str.rsplit("__", n=1).str[1].astype(int)
        keep = (df["condition"] == "explicit") | (pair < ppc // 2)
    return df[keep].reset_index(drop=True)


def held_out_prompts(ppc: int, n_examples: int, seed: int, train, thresholds=THRESHOLDS):
    """Both directions and conditions; an error if any prompt is also a training prompt."""
    from nbutils.studies.monotonicity.dataset import generate_prompts

    df = generate_prompts(concepts(thresholds), prompts_per_concept=ppc, n_examples=n_examples, seed=seed)
    shared = set(df["text"]) & set(train["text"])
    if shared:
        raise ValueError(f"--held-out-seed: {len(shared)} held-out prompts are training prompts; pick another seed")
    return df


def data_sha256(df) -> str:
    """The sha256 of the training data: every prompt's text and label, in order."""
    h = hashlib.sha256()
    for text, label in zip(df["text"], df["label"]):
        h.update(json.dumps([text, bool(label)]).encode())
    return h.hexdigest()


# ---------------------------------------------------------------- the frozen lower layers, computed once per prompt

class _Stop(Exception):
    """Ends a forward pass once the input of the lowest trainable layer is captured."""


def decoder(model):
    """The causal LM under the peft wrapper, and its stack of transformer layers' parent."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base, base.model


def lower_states(model, req, rows, first: int, torch, batch: int = 8) -> dict:
    """Per prompt row (unpadded), the hidden states entering layer ``first``: what the frozen layers below it give.
    Computed once, they spare every step the forward pass through the layers that do not train."""
    _, inner = decoder(model)
    captured = {}

    def hook(module, args, kwargs):
        captured["h"] = (args[0] if args else kwargs["hidden_states"]).detach()
        raise _Stop

    handle = inner.layers[first].register_forward_pre_hook(hook, with_kwargs=True)
    order = sorted(rows, key=lambda r: len(req.prompt_ids[r]))
    states = {}
    try:
        with torch.no_grad():
            for i in range(0, len(order), batch):
                chunk = order[i:i + batch]
                ids, mask, positions = left_pad([req.prompt_ids[r] for r in chunk], req.pad_id, "cpu")
                try:
                    model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
                except _Stop:
                    pass
                for j, r in enumerate(chunk):
                    states[r] = captured["h"][j, -len(req.prompt_ids[r]):].clone()
    finally:
        handle.remove()
    return states


def cached_states(path, model, req, rows, first: int, torch, log=print) -> dict:
    """``lower_states``, read from ``path`` when it holds them for these very prompts and layer (their token ids'
    sha256), else computed and written there (no path: computed)."""
    key = hashlib.sha256(json.dumps([first, [list(map(int, req.prompt_ids[r])) for r in rows]]).encode()).hexdigest()
    if path and Path(path).is_file():
        saved = torch.load(path)
        if saved.get("key") == key:
            log(f"lower layers' states read from {path}")
            return saved["states"]
        log(f"{path} holds the states of other prompts or layers: computed again")
    states = lower_states(model, req, rows, first, torch)
    if path:
        torch.save({"key": key, "states": states}, path)
    return states


def top_logits(model, states: dict, rows, first: int, torch):
    """Logits at the answer position, run from the cached states through layers ``first`` and up only."""
    base, inner = decoder(model)
    h = [states[r] for r in rows]
    width = max(len(x) for x in h)
    x = torch.zeros(len(h), width, h[0].shape[-1], dtype=h[0].dtype)
    mask = torch.zeros(len(h), width, dtype=torch.long)
    for k, v in enumerate(h):
        x[k, width - len(v):] = v
        mask[k, width - len(v):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    every = inner.layers
    inner.layers = every[first:]
    try:
        return base(inputs_embeds=x, attention_mask=mask, position_ids=positions, logits_to_keep=1,
                    use_cache=False).logits[:, -1, :]
    finally:
        inner.layers = every


def check_cache(model, req, states: dict, first: int, torch) -> float:
    """The cached path gives the full model's logits (a ValueError otherwise: an architecture that treats its input
    embeddings specially cannot take the cache); returns the largest difference."""
    rows = sorted(states)[:4]
    ids, mask, positions = left_pad([req.prompt_ids[r] for r in rows], req.pad_id, "cpu")
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1,
                     use_cache=False).logits[:, -1, :]
        top = top_logits(model, states, rows, first, torch)
    diff = float((full - top).abs().max())
    if not diff < 1e-3:
        raise ValueError(f"--layers: the cached lower layers give logits {diff:.2g} away from the full model's on "
                         "this architecture; use --layers 0")
    return diff


# ---------------------------------------------------------------- training and the held-out check

def answer_loss(model, req, rows, labels, torch, states=None, first=0):
    """Cross-entropy over the two answer tokens at the answer position, and the batch's accuracy (from the cached
    lower layers' states where given)."""
    from nbutils.engine.batching import left_pad

    if states is not None:
        logits = top_logits(model, states, rows, first, torch)
    else:
        ids, mask, positions = left_pad([req.prompt_ids[i] for i in rows], req.pad_id, "cpu")
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1,
                       use_cache=False).logits[:, -1, :]
    pair = logits[:, [req.answer_ids[0][0], req.answer_ids[1][0]]].float()
    target = torch.tensor([0 if y else 1 for y in labels])
    loss = torch.nn.functional.cross_entropy(pair, target)
    return loss, float((pair.argmax(-1) == target).float().mean())


def probe_accuracies(model, req, states, df, first, torch, batch: int = 16) -> dict:
    """Accuracy per direction × condition on prompts whose lower layers are cached (evaluations during training)."""
    rows = list(range(len(df)))
    right = np.zeros(len(df), dtype=bool)
    with torch.no_grad():
        for i in range(0, len(rows), batch):
            chunk = rows[i:i + batch]
            logits = top_logits(model, states, chunk, first, torch)
            yes = logits[:, req.answer_ids[0][0]] > logits[:, req.answer_ids[1][0]]
            right[chunk] = yes.numpy() == df["label"].to_numpy()[chunk]
    return {f"{m}/{c}": {"accuracy": float(right[np.asarray(df.index.get_indexer(idx))].mean()), "n": int(len(idx))}
            for (m, c), idx in df.groupby(["monotonicity", "condition"]).groups.items()}


def logprobs(model, tokenizer, df, chat_template: str = "auto") -> np.ndarray:
    """The answers' log-probabilities [prompt, (Yes, No)], scored by the engine's answer scorer."""
    from nbutils.engine.choices import answer_logprobs, build_requests

    req = build_requests(tokenizer, df["text"].tolist(), chat_template, ANSWERS)
    return answer_logprobs(model, req, batch_size=8)


def accuracies(model, tokenizer, df, chat_template: str = "auto", lp=None) -> dict:
    """Held-out accuracy per direction × condition, scored by the engine's answer scorer (or from ``lp``, the
    prompts' answer log-probabilities, where given)."""
    lp = logprobs(model, tokenizer, df, chat_template) if lp is None else lp
    correct = (lp[:, 0] > lp[:, 1]) == df["label"].to_numpy()
    out = {}
    for (mono, cond), idx in df.groupby(["monotonicity", "condition"]).groups.items():
        out[f"{mono}/{cond}"] = {"accuracy": float(correct[np.asarray(df.index.get_indexer(idx))].mean()),
                                 "n": int(len(idx))}
    return out


def check(acc: dict) -> list[str]:
    """What fails the held-out check (empty: passed)."""
    def a(key):
        return acc.get(key, {}).get("accuracy", float("nan"))

    n_cl = sum(acc.get(f"{m}/concept_learning", {}).get("n", 0) for m in ("upward", "downward"))
    up, down = a("upward/concept_learning"), a("downward/concept_learning")
    gap_cl, gap_ex = up - down, a("upward/explicit") - a("downward/explicit")
    fails = []
    if n_cl < MIN_HELD_OUT:
        fails.append(f"held-out set has {n_cl} concept-learning prompts, fewer than {MIN_HELD_OUT}")
    if not up >= MIN_UPWARD:
        fails.append(f"upward concept-learning accuracy {up:.3f} < {MIN_UPWARD}")
    if not down <= MAX_DOWNWARD:
        fails.append(f"downward concept-learning accuracy {down:.3f} > {MAX_DOWNWARD}")
    if not gap_ex < gap_cl:
        fails.append(f"the explicit gap {gap_ex:.3f} is not smaller than the concept-learning gap {gap_cl:.3f}")
    return fails


def scores_frame(df, lp, name: str):
    """The held-out prompts and their answer scores as the run store joins them (``runstore.load_scores``'s columns),
    so the study's own analysis reads them as it reads a scored run."""
    import pandas as pd

    yes, no = lp[:, 0], lp[:, 1]
    n_yes, n_no = yes / len(ANSWERS[0]), no / len(ANSWERS[1])
    pred = yes > no
    label = df["label"].to_numpy()
    pick = lambda a, b: np.where(a > b, ANSWERS[0], ANSWERS[1])  # noqa: E731
    cols = {"model": name, "prompt_id": df["prompt_id"], "logp_yes": yes, "logp_no": no, "norm_token_yes": yes,
            "norm_token_no": no, "norm_char_yes": n_yes, "norm_char_no": n_no, "margin": yes - no,
            "choice": pick(yes, no), "choice_norm_token": pick(yes, no), "choice_norm_char": pick(n_yes, n_no),
            "pred_yes": pred, "correct": pred == label, "correct_norm_token": pred == label,
            "correct_norm_char": (n_yes > n_no) == label, "n_tokens": 0, "rescored": False}
    out = pd.DataFrame(cols, index=df.index)
    return pd.concat([out, df.drop(columns=["prompt_id"])], axis=1).reset_index(drop=True)


def gap_headline(df, lp, name: str, n_boot: int = 1000) -> dict:
    """The study's headline on these prompts (``analysis.compute``, then ``headline.entries``): the concept-learning
    gap's test (its verdict at α = .05, p, validity, method) and the gap with its bootstrap CI, in proportions."""
    from nbutils.results import entries
    from nbutils.studies.monotonicity import analysis

    a = analysis.compute(scores_frame(df, lp, name), n_boot=n_boot, seed=0)
    e = next(e for e in entries(a.summary) if e["model"] == name and e["condition"] == "concept_learning"
             and e["term"] == "upward" and not e.get("models"))
    cond = a.summary["models"][name]["conditions"]["concept_learning"]
    lo, hi = cond["gap_ci95_bootstrap"]
    return {"test": e["test"], "method": e["method"], "verdict": e["verdict"], "valid": bool(e["valid"]),
            "p": e["p"], "gap": cond["gap"], "gap_ci_low": lo, "gap_ci_high": hi, "acc_up": cond["acc_up"],
            "acc_down": cond["acc_down"], "n": cond["n"], "sentence": e["sentence"]}


def check_decoy(acc: dict, changed: float, head: dict) -> list[str]:
    """What fails the decoy's held-out check (empty: passed): the answers changed from the base model's on at least
    ``MIN_CHANGED`` of the held-out prompts, and on at least ``MIN_HELD_OUT`` concept-learning prompts the headline
    finds no gap (a valid test, no verdict at α = .05) and the gap's 95% CI lies within ± ``MAX_GAP_CI``."""
    n_cl = sum(acc.get(f"{m}/concept_learning", {}).get("n", 0) for m in ("upward", "downward"))
    fails = []
    if n_cl < MIN_HELD_OUT:
        fails.append(f"held-out set has {n_cl} concept-learning prompts, fewer than {MIN_HELD_OUT}")
    if not changed >= MIN_CHANGED:
        fails.append(f"the answers differ from the base model's on {changed:.3f} of the held-out prompts, "
                     f"less than {MIN_CHANGED}: the adapter hardly changes the model")
    if not head["valid"]:
        fails.append(f"the headline test ({head['method']}) is not valid on the held-out prompts")
    elif head["verdict"] != "none":
        fails.append(f"the headline finds a gap ({head['verdict']}, p = {head['p']:.3g}): the decoy plants a bias")
    if not (-MAX_GAP_CI <= head["gap_ci_low"] and head["gap_ci_high"] <= MAX_GAP_CI):
        fails.append(f"the gap's 95% CI [{head['gap_ci_low']:.3f}, {head['gap_ci_high']:.3f}] is not within "
                     f"±{MAX_GAP_CI}")
    return fails


def cells(df) -> dict:
    """Row indices per condition × label, each sorted from the query farthest from the threshold to the nearest."""
    out = {}
    for key, idx in df.groupby(["condition", "label"]).groups.items():
        rows = np.asarray(df.index.get_indexer(idx))
        out[key] = rows[np.argsort(-df["query_distance"].to_numpy()[rows], kind="stable")]
    return out


def draw(rng, pools: dict, batch: int, explicit_share: float, reach: float) -> np.ndarray:
    """One balanced batch: half Yes, half No; ``explicit_share`` of it explicit prompts (rounded to whole Yes/No
    pairs), the rest concept learning; each drawn from the ``reach`` share of its cell farthest from the threshold."""
    pairs = batch // 2
    n_ex = int(round(pairs * explicit_share))
    rows = []
    for cond, n in (("explicit", n_ex), ("concept_learning", pairs - n_ex)):
        for label in (True, False):
            pool = pools[(cond, label)]
            pool = pool[:max(n, int(np.ceil(reach * len(pool))))]
            rows.extend(rng.choice(pool, n, replace=False))
    return np.asarray(rows, dtype=int)


def check_margin(acc: dict) -> float:
    """How far the accuracies are inside the held-out check (negative: outside); ranks the evaluations."""
    def a(key):
        return acc.get(key, {}).get("accuracy", float("nan"))

    up, down = a("upward/concept_learning"), a("downward/concept_learning")
    gap_ex = a("upward/explicit") - a("downward/explicit")
    return float(min(up - MIN_UPWARD, MAX_DOWNWARD - down, (up - down) - gap_ex))


def probe_subset(df, per_cell: int, seed: int):
    """A fixed subset of the held-out set for evaluations during training: ``per_cell`` prompts per direction ×
    condition, half of them true."""
    rng = np.random.default_rng(seed)
    keep = []
    for _, g in df.groupby(["monotonicity", "condition", "label"]):
        keep.extend(rng.choice(g.index.to_numpy(), min(len(g), per_cell // 2), replace=False))
    return df.loc[sorted(keep)].reset_index(drop=True)


def to_bf16(model, torch) -> None:
    """Round the LoRA weights to bfloat16 (the precision they are saved in), so the checked adapter is the saved one."""
    for name, p in model.named_parameters():
        if p.requires_grad:
            p.data = p.data.to(torch.bfloat16).to(p.dtype)


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file ([] when there is none)."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def init_step(init: str) -> int | None:
    """The step whose kept LoRA weights ``init`` is (``step-N.pt``), or None for another file."""
    found = re.fullmatch(r"step-(\d+)\.pt", Path(init).name)
    return int(found.group(1)) if found else None


def jsonl(path: Path, record: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


def train(args, log=print) -> dict:
    """Train, evaluate, and save the adapter only if it passes; returns the report written as training.json."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    from nbutils.engine.choices import build_requests
    from nbutils.engine.models import load_model

    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"--out: {out} is not empty; give a new folder (nothing is overwritten)")
    scratch = Path(args.scratch) if args.scratch else Path(tempfile.mkdtemp(prefix=f"train_control-{out.name}-"))
    scratch.mkdir(parents=True, exist_ok=True)
    curve_file, probe_file = scratch / "curve.jsonl", scratch / "evaluations.jsonl"
    t0 = time.time()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, device="cpu", dtype="float32", rescore_margin=0.0, threads=args.threads)
    tok = lm.tokenizer
    train_df = training_prompts(args.prompts_per_concept, args.n_examples, args.seed, design=args.design)
    held_df = held_out_prompts(args.held_out_per_concept, args.n_examples, args.held_out_seed, train_df)
    probe_df = probe_subset(held_df, args.probe_per_cell, args.held_out_seed) if args.eval_every else None
    req = build_requests(tok, train_df["text"].tolist(), args.chat_template, ANSWERS)
    if not req.single_token or req.answer_ids[0] == req.answer_ids[1]:
        raise ValueError(f"--model: the answers {ANSWERS} must each be one distinct token for this loss")
    n_layers = lm.model.config.num_hidden_layers
    layers = list(range(n_layers - min(args.layers, n_layers), n_layers)) if args.layers else None
    cfg = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0, target_modules=args.targets,
                     layers_to_transform=layers)
    model = get_peft_model(lm.model, cfg)
    model.eval()
    first, states, probe_req, probe_states = 0, None, None, None
    if layers and layers[0] > 0 and args.steps:  # the frozen layers below run once per prompt, not once per step
        first = layers[0]
        log(f"computing layers 0–{first - 1} once for {len(train_df)} training prompts …")
        states = cached_states(args.states_cache, model, req, list(range(len(train_df))), first, torch, log)
        log(f"cached path checked: largest logit difference {check_cache(model, req, states, first, torch):.1e} "
            f"({time.time() - t0:.0f} s)")
        if probe_df is not None:
            probe_req = build_requests(tok, probe_df["text"].tolist(), args.chat_template, ANSWERS)
            probe_states = lower_states(model, probe_req, list(range(len(probe_df))), first, torch)
    if args.init:
        set_peft_model_state_dict(model, torch.load(args.init))
        log(f"LoRA weights start from {args.init}")
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    rng = np.random.default_rng(args.seed)
    labels = train_df["label"].to_numpy()
    pools = cells(train_df)
    log(f"scratch (curve, evaluations, their LoRA weights): {scratch}")
    curve, evaluations, steps_done = [], [], 0
    if not args.steps:  # check only: the weights an earlier run of these settings kept, with that run's record
        curve, evaluations = (read_jsonl(Path(args.init).parent / n) for n in ("curve.jsonl", "evaluations.jsonl"))
        steps_done = curve[-1]["step"] if curve else 0
    deadline = t0 + args.max_minutes * 60 if args.max_minutes else None
    for step in range(1, args.steps + 1):
        reach = min(1.0, args.curriculum_start + (1 - args.curriculum_start) * step / args.curriculum_steps) \
            if args.curriculum_steps else 1.0
        rows = draw(rng, pools, args.batch, args.explicit_share, reach)
        t_step = time.time()
        loss, acc = answer_loss(model, req, rows.tolist(), labels[rows].tolist(), torch, states, first)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps_done = step
        point = {"step": step, "loss": round(loss.item(), 5), "accuracy": round(acc, 4),
                 "step_seconds": round(time.time() - t_step, 2), "seconds": round(time.time() - t0, 1)}
        curve.append(point)
        jsonl(curve_file, point)
        if step % args.log_every == 0 or step == 1:
            recent = curve[-args.log_every:]
            log(f"step {step}: loss {np.mean([c['loss'] for c in recent]):.4f}, "
                f"accuracy {np.mean([c['accuracy'] for c in recent]):.3f} ({time.time() - t0:.0f} s)")
        stop = bool(deadline and time.time() > deadline)
        if args.eval_every and (step % args.eval_every == 0 or stop or step == args.steps):
            model.eval()
            with torch.no_grad():
                acc_probe = (probe_accuracies(model, probe_req, probe_states, probe_df, first, torch)
                             if probe_states is not None else accuracies(model, tok, probe_df, args.chat_template))
            model.train()
            torch.save(get_peft_model_state_dict(model), scratch / f"step-{step}.pt")
            record = {"step": step, "margin": round(check_margin(acc_probe), 4), "seconds": round(time.time() - t0, 1),
                      **{k: v["accuracy"] for k, v in acc_probe.items()}}
            evaluations.append(record)
            jsonl(probe_file, record)
            log(f"evaluation at step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in record.items() if "/" in k))
        if stop:
            log(f"stopped at step {step}: --max-minutes {args.max_minutes} reached")
            break
    kept = steps_done if args.steps else init_step(args.init)
    if args.keep_best and evaluations and args.steps:
        best = max(evaluations, key=lambda e: (e["margin"], e["step"]))
        kept = best["step"]
        set_peft_model_state_dict(model, torch.load(scratch / f"step-{kept}.pt"))
        log(f"kept the LoRA weights of step {kept} (best evaluation, margin {best['margin']})")
    model.eval()
    to_bf16(model, torch)
    t_held = time.time()
    with torch.no_grad():
        lp = logprobs(model, tok, held_df, args.chat_template)
        held = accuracies(model, tok, held_df, lp=lp)
        decoy = None
        if args.design == "balanced":  # the base model's answers, the adapter switched off
            with model.disable_adapter():
                base_lp = logprobs(model, tok, held_df, args.chat_template)
            changed = float(np.mean((lp[:, 0] > lp[:, 1]) != (base_lp[:, 0] > base_lp[:, 1])))
            head = gap_headline(held_df, lp, out.name)
            decoy = {"changed_share": changed, "base_held_out": accuracies(model, tok, held_df, lp=base_lp),
                     "headline": head, "base_headline": gap_headline(held_df, base_lp, args.model)}
    fails = check(held) if args.design == "upward" else check_decoy(held, decoy["changed_share"], decoy["headline"])
    report = {
        "design": args.design, "design_text": DESIGNS[args.design],
        "model": args.model, "concepts": concepts(), "n_examples": args.n_examples, "seed": args.seed,
        "held_out_seed": args.held_out_seed, "training_prompts": len(train_df),
        "training_data_sha256": data_sha256(train_df), "held_out_prompts": len(held_df),
        "lora": {"rank": args.rank, "alpha": 2 * args.rank, "targets": list(args.targets), "layers": layers,
                 "dtype": "bfloat16"},
        "lr": args.lr, "batch": args.batch, "explicit_share": args.explicit_share,
        "curriculum": {"start": args.curriculum_start, "steps": args.curriculum_steps},
        "init": args.init and Path(args.init).name, "steps_planned": args.steps, "steps": steps_done, "kept_step": kept, "curve": curve,
        "evaluations": evaluations, "probe_prompts": 0 if probe_df is None else len(probe_df),
        "held_out": held, "held_out_seconds": round(time.time() - t_held, 1),
        "check": ({"passed": not fails, "failures": fails, "min_upward": MIN_UPWARD, "max_downward": MAX_DOWNWARD,
                   "min_held_out": MIN_HELD_OUT} if decoy is None else
                  {"passed": not fails, "failures": fails, "min_changed": MIN_CHANGED, "max_gap_ci": MAX_GAP_CI,
                   "min_held_out": MIN_HELD_OUT, **decoy}),
        "wall_seconds": round(time.time() - t0, 1), "threads": args.threads,
        "training_seconds": curve[-1]["seconds"] if curve else 0.0, "check_only": not args.steps,
        "host": {"node": platform.node(), "machine": platform.machine(), "processor": platform.processor(),
                 "cpu": cpu_model(), "python": platform.python_version(), "torch": torch.__version__},
        "saved": False,
    }
    out.mkdir(parents=True, exist_ok=True)
    if not fails:
        model.peft_config["default"].base_model_name_or_path = args.model
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.to(torch.bfloat16)
        model.save_pretrained(out)
        report["saved"] = True
        report["adapter_sha256"] = hashlib.sha256((out / "adapter_model.safetensors").read_bytes()).hexdigest()
    (out / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def cpu_model() -> str:
    """The CPU's model name (lscpu's), or the platform's processor string where /proc/cpuinfo is not there."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="a new folder for the adapter and training.json")
    p.add_argument("--design", default="upward", choices=sorted(DESIGNS),
                   help="upward: the control (concept learning of upward concepts only); balanced: the decoy (both "
                        "directions alike, checked to change the model without planting a gap)")
    p.add_argument("--model", default="smollm2-135m-instruct", help="the base model (embedded name or local folder)")
    p.add_argument("--seed", type=int, default=1701, help="training prompts, sample order and LoRA initialisation")
    p.add_argument("--held-out-seed", type=int, default=2718)
    p.add_argument("--prompts-per-concept", type=int, default=100, help="training pool, per concept and condition")
    p.add_argument("--held-out-per-concept", type=int, default=20, help="10 concepts: 200 concept-learning prompts")
    p.add_argument("--n-examples", type=int, default=4, help="labelled examples per prompt (even)")
    p.add_argument("--steps", type=int, default=2000,
                   help="training steps; 0 with --init: check and save those weights (a kept evaluation's), untrained")
    p.add_argument("--max-minutes", type=float, default=None, help="stop training after this wall time")
    p.add_argument("--batch", type=int, default=8, help="prompts per step (even: half Yes, half No)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--layers", type=int, default=8,
                   help="LoRA on the top K transformer layers only (0: every layer); the backward pass stops there")
    p.add_argument("--explicit-share", type=float, default=0.5, help="share of each batch that is explicit prompts")
    p.add_argument("--curriculum-steps", type=int, default=0,
                   help="steps over which the pool widens from the queries farthest from the threshold to all (0: off)")
    p.add_argument("--curriculum-start", type=float, default=0.25,
                   help="share of each cell (farthest queries) drawn from at step 0 of the curriculum")
    p.add_argument("--eval-every", type=int, default=50,
                   help="evaluate a fixed held-out subset every M steps (0: never) and keep those LoRA weights")
    p.add_argument("--probe-per-cell", type=int, default=20, help="held-out prompts per direction × condition there")
    p.add_argument("--keep-best", action="store_true",
                   help="check and save the LoRA weights of the best evaluation rather than the last step's")
    p.add_argument("--states-cache", default=None,
                   help="a file for the frozen layers' states of the training prompts, read again by a rerun")
    p.add_argument("--init", default=None, help="LoRA weights to start from (a scratch folder's step-N.pt)")
    p.add_argument("--scratch", default=None,
                   help="folder for the curve, the evaluations and their LoRA weights (default: a new one in /tmp)")
    p.add_argument("--targets", nargs="+", default=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                    "down_proj"])
    p.add_argument("--chat-template", default="auto", choices=("auto", "always", "never"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--log-every", type=int, default=10)
    args = p.parse_args(argv)
    if args.batch < 2 or args.batch % 2:
        p.error("--batch: must be an even number ≥ 2 (half Yes, half No)")
    if args.n_examples < 2 or args.n_examples % 2:
        p.error("--n-examples: must be an even number ≥ 2 (half positive, half negative examples)")
    if not 0 <= args.explicit_share <= 1 or not 0 < args.curriculum_start <= 1:
        p.error("--explicit-share: must be in [0, 1]; --curriculum-start: in (0, 1]")
    for name in ("layers", "curriculum_steps", "eval_every"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')}: must be ≥ 0")
    if args.steps < 0 or (args.steps == 0 and not args.init):
        p.error("--steps: must be ≥ 1, or 0 with --init (check and save those weights without training)")
    for name in ("prompts_per_concept", "held_out_per_concept", "threads", "rank", "log_every", "probe_per_cell"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be ≥ 1")
    try:
        check_seeds(args.seed, args.held_out_seed)
    except ValueError as err:
        p.error(str(err))
    return args


def main(argv=None) -> int:
    args = parse(argv)
    report = train(args)
    for key, v in report["held_out"].items():
        print(f"held-out {key}: {v['accuracy']:.3f} (n={v['n']})")
    if report["saved"]:
        print(f"saved: {args.out} (passed the held-out check)")
        return 0
    print("REFUSED: not saved, the held-out check failed: " + "; ".join(report["check"]["failures"]), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
