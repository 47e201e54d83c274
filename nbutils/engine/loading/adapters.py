"""A PEFT LoRA adapter applied on loaded base weights: found (a local folder, or a hub id downloaded once), checked
against the base (its config's base model, then every LoRA matrix's shape against the layer it adapts), loaded with
peft and merged into the weights, so the scorers see a plain model whose scores equal the adapted model's."""
from __future__ import annotations

from pathlib import Path

import torch

from ... import adapters


def adapter_folder(adapter: str, revision: str | None = None) -> Path:
    """The local folder of ``adapter``: itself when it is a path, else the hub snapshot of its adapter files."""
    if adapters.is_local(adapter):
        return adapters.local_folder(adapter)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(adapter, revision=revision,
                                      allow_patterns=[adapters.CONFIG, *adapters.WEIGHTS, "README.md"]))
    except Exception as err:  # offline, unknown repository, no access: all say the same to the user
        raise ValueError(f"adapter: cannot fetch {adapter!r} from the hub ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''}); give a local folder, or a hub id already "
                         "in the local cache (HF_HUB_OFFLINE=1 forbids downloads)") from None


def check_shapes(net: torch.nn.Module, folder: Path, adapter: str) -> int:
    """Every LoRA matrix of the adapter fits a layer of ``net``: ``lora_A`` (r × in) and ``lora_B`` (out × r) of a
    linear layer that exists, with its in and out features; an error naming ``adapter`` otherwise. The number of
    adapted layers."""
    from safetensors import safe_open

    files = [adapters.check_weights(folder)]
    layers: dict[str, dict[str, tuple]] = {}
    with safe_open(str(files[0]), framework="pt") as f:
        for key in f.keys():
            for part in ("lora_A", "lora_B"):
                marker = f".{part}."
                if marker in key:
                    layer = key.split(marker)[0].removeprefix("base_model.model.")
                    layers.setdefault(layer, {})[part] = tuple(f.get_slice(key).get_shape())
    if not layers:
        raise ValueError(f"adapter: {files[0]} holds no LoRA matrices (lora_A / lora_B)")
    for layer, shapes in sorted(layers.items()):
        try:
            module = net.get_submodule(layer)
        except AttributeError:
            raise ValueError(f"adapter: {adapter!r} adapts layer {layer!r}, which this base model does not have: it "
                             "was made for another architecture") from None
        in_f, out_f = _features(module)
        a, b = shapes.get("lora_A"), shapes.get("lora_B")
        if a is None or b is None or a[-1] != in_f or b[0] != out_f or a[0] != b[-1]:
            raise ValueError(f"adapter: {adapter!r} does not fit layer {layer!r} of this base model (its LoRA "
                             f"matrices are A {a} and B {b}; the layer maps {in_f} → {out_f} features): it was made "
                             "for another model or size")
    return len(layers)


def _features(module: torch.nn.Module) -> tuple[int | None, int | None]:
    """(in, out) features of a linear layer (``nn.Linear``, or GPT-2's ``Conv1D`` with its weight transposed)."""
    if hasattr(module, "in_features"):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D":
        return tuple(module.weight.shape)
    return None, None


def apply_adapter(net: torch.nn.Module, adapter: str, model: str, names: tuple[str, ...] = (),
                  scale: float = 1.0) -> tuple[torch.nn.Module, dict]:
    """``net`` with the LoRA ``adapter`` merged into its weights (``model``, ``names``: what the base is called, for
    ``adapters.check_base``), and what the score file records of it. ``scale``: the adapter's strength, set through
    peft's own scaling (each LoRA layer's ``set_scale``: alpha / r times ``scale``) before the merge, so 0 merges
    nothing and leaves the base weights as they were."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    folder = adapter_folder(adapter)
    config = adapters.read_config(folder, adapter)
    adapters.check_base(config, adapter, model, names)
    n_layers = check_shapes(net, folder, adapter)
    try:
        peft_model = PeftModel.from_pretrained(net, str(folder), is_trainable=False)
    except (ValueError, RuntimeError, KeyError) as err:
        raise ValueError(f"adapter: {adapter!r} cannot be applied to this base model ({type(err).__name__}: "
                         f"{str(err).splitlines()[0]})") from None
    if scale != 1:
        for module in peft_model.modules():
            if isinstance(module, LoraLayer):
                for name in module.active_adapters:
                    module.set_scale(name, scale)
    merged = peft_model.merge_and_unload()  # equal to the unmerged adapter to the loaded precision's rounding
    if scale != 1:  # a strength the weights' precision cannot hold is said as such, not blamed on the model
        bad = next((n for n, w in merged.named_parameters() if not torch.isfinite(w).all()), None)
        if bad is not None:
            raise ValueError(f"adapter_scale: {scale!r} merges {adapter} into weights that are not finite (first: "
                             f"{bad}) at this precision; use a smaller adapter_scale (1: the adapter as trained)")
    meta = {"adapter_sha256": adapters.weights_sha256(folder),
            "adapter_base_model": config.get("base_model_name_or_path"), "adapter_rank": config.get("r"),
            "adapter_alpha": config.get("lora_alpha"), "adapter_layers": n_layers, "adapter_merged": True}
    return merged.eval(), meta
