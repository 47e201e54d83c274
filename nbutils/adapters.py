"""A PEFT LoRA adapter as a scoring setting, read without a model: where it is, what its config says, which base model
it was made for, and the sha256 of its weights (part of a score file's identity, so a changed adapter is never
"already scored"). Applying it to loaded weights is ``engine.loading.adapters``."""
from __future__ import annotations

import json
from pathlib import Path

from . import paths

CONFIG = "adapter_config.json"
WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def local_folder(adapter: str) -> Path:
    """Where a local adapter lies: an absolute path as it is, a relative one taken from the project root
    (``paths.root()``, where the notebooks run), whatever the working directory (a model file's own folder is tried
    first when the sweep reads it: ``model_files``)."""
    p = Path(adapter).expanduser()
    return p if p.is_absolute() else paths.root() / p


def is_local(adapter: str) -> bool:
    """Whether ``adapter`` names a local folder (a path, or anything that exists in the project root) rather than a
    hub id (``owner/name``)."""
    return (adapter.startswith(("/", ".", "~")) or adapter.count("/") != 1 or "\\" in adapter
            or local_folder(adapter).exists())


def check_setting(adapter) -> None:
    """``adapter`` is None or a non-empty text naming a folder or a hub id."""
    if adapter is not None and (not isinstance(adapter, str) or not adapter.strip()):
        raise ValueError(f"adapter: must be None, a local folder holding a PEFT LoRA adapter ({CONFIG} and "
                         f"{WEIGHTS[0]}) or a hub id (owner/name), got {adapter!r}")


def read_config(folder, adapter: str) -> dict:
    """The adapter's ``adapter_config.json`` from ``folder``: an error naming ``adapter`` when the folder does not
    exist, holds no config or weights, or the adapter is not a LoRA."""
    local = Path(folder).expanduser()
    local = local if local.is_absolute() else paths.root() / local
    if not local.exists():
        raise ValueError(f"adapter: no such folder {local.absolute()}; give a folder holding a PEFT LoRA adapter "
                         f"({CONFIG} and {WEIGHTS[0]}, as peft's save_pretrained writes them) or a hub id owner/name")
    if not local.is_dir() or not (local / CONFIG).is_file():
        raise ValueError(f"adapter: {local.absolute()} is not a PEFT adapter folder (no {CONFIG}); save one with "
                         "peft_model.save_pretrained(folder)")
    try:
        config = json.loads((local / CONFIG).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"adapter: {local / CONFIG} cannot be read ({type(err).__name__}: {err})") from None
    kind = config.get("peft_type") if isinstance(config, dict) else None
    if kind != "LORA":
        raise ValueError(f"adapter: {local.absolute()} is a {kind or 'unknown'} adapter; only LoRA adapters "
                         "(peft_type LORA) can be scored here")
    check_weights(local)
    return config


def check_weights(folder: Path) -> Path:
    """The adapter's weights file, once it is a whole safetensors file: its header's length, its header (JSON) and its
    size (the header's tensors end where the file ends) are checked before any model loads. A pickled ``.bin`` is
    refused by name (unpickling can run code; peft writes safetensors by default)."""
    files = weight_files(folder)
    if not files:
        raise ValueError(f"adapter: {Path(folder).absolute()} holds no weights ({WEIGHTS[0]})")
    f = files[0]
    if f.suffix != ".safetensors":
        raise ValueError(f"adapter: {f} is a pickled PyTorch file; only safetensors weights are read (unpickling can "
                         f"run code): save the adapter again with peft_model.save_pretrained(folder, "
                         f"safe_serialization=True), which writes {WEIGHTS[0]}")
    size = f.stat().st_size
    again = f"it was cut short (a copy or download stopped) or is not safetensors; copy or save the adapter again"
    with open(f, "rb") as h:
        head = h.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if n < 2 or n > size - 8:
            raise ValueError(f"adapter: {f} is not a whole safetensors file (its {size} bytes hold no header of "
                             f"the length it gives); {again}")
        try:
            header = json.loads(h.read(n))
            ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            raise ValueError(f"adapter: {f} has a damaged safetensors header (not the JSON it should be); "
                             f"{again}") from None
    if 8 + n + max(ends, default=0) != size:
        raise ValueError(f"adapter: {f} is not a whole safetensors file (its header describes "
                         f"{8 + n + max(ends, default=0)} bytes, the file has {size}); {again}")
    return f


def weight_files(folder) -> list[Path]:
    """The adapter's weights file(s) in ``folder`` (safetensors first)."""
    return [Path(folder) / name for name in WEIGHTS if (Path(folder) / name).is_file()][:1]


def weights_sha256(folder) -> str:
    """The sha256 of the adapter's weights file (what a score file records as ``adapter_sha256``)."""
    from .artifacts import sha256_file

    files = weight_files(local_folder(str(folder)))
    if not files:
        raise ValueError(f"adapter: {folder} holds no weights ({' or '.join(WEIGHTS)})")
    return sha256_file(files[0])


def local_sha256(adapter: str | None) -> str | None:
    """The weights' sha256 of a local adapter folder that exists (None otherwise: no adapter, or a hub id, whose
    digest is known once it is downloaded)."""
    if not adapter or not is_local(adapter) or not weight_files(local_folder(adapter)):
        return None
    return weights_sha256(local_folder(adapter))


def check_base(config: dict, adapter: str, model: str, names: tuple[str, ...] = ()) -> None:
    """The adapter was made for ``model``: its ``base_model_name_or_path`` is the model's name, one of ``names``
    (other names the model goes by: the hub id an embedded model stands for), the same folder, or a folder of the
    same name (a local copy of a hub model). An adapter that records no base is taken on its shapes alone."""
    base = config.get("base_model_name_or_path")
    if not base:
        return
    accepted = {model, *names}
    same = base in accepted or base.lower() in {n.lower() for n in accepted}
    if not same and Path(model).expanduser().exists():
        here, there = Path(model).expanduser().resolve(), Path(base).expanduser()
        same = (there.exists() and there.resolve() == here) or here.name == Path(base.rstrip("/")).name
    if not same:
        raise ValueError(f"adapter: {adapter!r} was made for base model {base!r}, not {model!r}"
                         + (f" (which stands for {', '.join(names)})" if names else "")
                         + f"; score it on its base model, or, if {model!r} is the same weights, set "
                         f"base_model_name_or_path in its {CONFIG}")
