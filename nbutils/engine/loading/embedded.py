"""The embedded models (their table: ``score_settings.EMBEDDED``): GGUF files shipped in PyPI packages, found, verified
and de-quantized once into a cache."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

import torch

from ...score_settings import DEFAULT_MODEL, EMBEDDED


def cache_dir() -> Path:
    """Where dequantized copies of GGUF models are kept (NBUTILS_CACHE, else ~/.cache/nbutils)."""
    return Path(os.environ.get("NBUTILS_CACHE", Path.home() / ".cache" / "nbutils"))


def embedded_gguf(name: str = DEFAULT_MODEL) -> tuple[Path, str]:
    """Folder and file name of an embedded GGUF model, found without importing its package (for a ``chunked`` one,
    the package folder, where its parts are found by the package itself)."""
    entry = EMBEDDED[name]
    if entry.parts:
        return part_files(name)[0].parent, entry.filename
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"model: {name!r} is an embedded model, but its package {entry.package} is not installed; "
                         f"run {entry.install}")
    folder = Path(list(spec.submodule_search_locations)[0])
    if not entry.chunked and not (folder / entry.filename).exists():
        raise ValueError(f"model: {folder / entry.filename} is missing from the installed {entry.package} package")
    return folder, entry.filename


def _joined_sha256(files):
    """The sha256 of ``files`` read one after the other: the file they make when joined in order."""
    import hashlib

    h = hashlib.sha256()
    for part in files:
        with open(part, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h


def _chunked_sha256(name: str):
    """(the package, the sha256 of its GGUF) for a ``chunked`` embedded model: its parts hashed in order, which is
    the assembled file's sha256, checked against the one the package records (a part missing or changed is an error)."""
    import importlib

    embedded_gguf(name)  # a clear error when the package is missing
    pkg = importlib.import_module(EMBEDDED[name].package)
    try:
        h = _joined_sha256(pkg.chunk_paths())
    except (ImportError, OSError) as err:
        raise ValueError(f"model: {name!r}: a part of its GGUF is missing ({type(err).__name__}: {err}); "
                         f"reinstall with {EMBEDDED[name].install}") from None
    if h.hexdigest() != pkg.EXPECTED_SHA256:
        raise ValueError(f"model: {name!r}: the installed parts of {EMBEDDED[name].filename} have sha256 "
                         f"{h.hexdigest()}, not the {pkg.EXPECTED_SHA256} its package records; reinstall with "
                         f"{EMBEDDED[name].install}")
    return pkg, h.hexdigest()


def part_files(name: str) -> list[Path]:
    """The GGUF parts of an embedded model shipped as data-only wheels (``Embedded.parts``), in order: each
    package's one ``data/*.bin``, found by its folder (the packages are never imported)."""
    entry = EMBEDDED[name]
    files = []
    for package in entry.parts:
        spec = importlib.util.find_spec(package)
        found = sorted(Path(list(spec.submodule_search_locations)[0]).glob("data/*.bin")) if spec else []
        if len(found) != 1:
            raise ValueError(f"model: {name!r} is an embedded model, but its part package {package} is "
                             f"{'not installed' if spec is None else 'not one data file'}; run {entry.install}")
        files.append(found[0])
    return files


def _parts_sha256(name: str, files: list[Path]) -> str:
    """The sha256 of the parts joined in order, checked against the one pinned in ``EMBEDDED``."""
    h = _joined_sha256(files)
    if h.hexdigest() != EMBEDDED[name].sha256:
        raise ValueError(f"model: {name!r}: its installed parts joined in order have sha256 {h.hexdigest()}, not "
                         f"the pinned {EMBEDDED[name].sha256}; reinstall with {EMBEDDED[name].install}")
    return h.hexdigest()


def _join(files: list[Path], target: Path) -> None:
    """Write the parts one after the other into ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        for part in files:
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 24)


def load_embedded(name: str, torch_dtype, **load_kwargs) -> tuple[torch.nn.Module, object, dict]:
    """Load the embedded GGUF model, dequantizing once into a float32 safetensors cache (``load_kwargs``, such as a
    bitsandbytes config, apply to the load from that cache)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ...artifacts import sha256_file

    entry = EMBEDDED[name]
    if entry.parts:
        files = part_files(name)
        digest = _parts_sha256(name, files)
        folder, filename = None, entry.filename
    elif entry.chunked:
        pkg, digest = _chunked_sha256(name)
        folder, filename = None, entry.filename
    else:
        folder, filename = embedded_gguf(name)
        digest = sha256_file(folder / filename)
    cached = cache_dir() / f"{name}-{digest[:16]}"
    meta = {"model_file": filename, "model_file_sha256": digest, "revision": f"gguf-sha256:{digest}"}
    if not (cached / "config.json").exists():
        print(f"nbutils: de-quantizing GGUF {filename} once into {cached}", file=sys.stderr, flush=True)
        if not (entry.chunked or entry.parts):
            _dequantize(folder, filename, cached)
        else:  # joined from its parts next to the cache, removed once the float32 copy is written
            folder = cached.with_name(cached.name + f".gguf{os.getpid()}")
            try:
                if entry.parts:
                    _join(files, folder / filename)
                else:
                    pkg.assemble(folder / filename, overwrite=True)
                _dequantize(folder, filename, cached)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(cached)
    model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch_dtype, **load_kwargs)
    # the folder's name in the nbutils cache (cache_dir()), not this machine's path: a sidecar is shared
    return model, tok, {**meta, "dequantized_cache": cached.name, "source_precision": source_precision(filename)}


def source_precision(filename: str) -> str:
    """What the weights were before they were loaded: ``gguf Q4_1, dequantized to float32``."""
    kind = re.search(r"[.-]((?:I?Q\d\w*)|F16|BF16|F32)\.gguf$", filename, re.IGNORECASE)
    return f"gguf {kind[1].upper() if kind else 'file'}, dequantized to float32"


def _dequantize(folder: Path, filename: str, cached: Path) -> None:
    """Write the GGUF ``folder/filename`` as a float32 safetensors model with its tokenizer to ``cached``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights below are plain float32 after dequantization
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(cached)
    except OSError:  # another process finished the same copy first: keep theirs
        if not (cached / "config.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
