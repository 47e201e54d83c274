"""Embedded models shipped as data-only wheels of GGUF parts (the Qwen2.5-Coder models): the parts found by their
package folders (never imported), joined in order, the joined file's pinned sha256 checked on every load; and what
``chat_template: auto`` means for them. Fake part packages stand in for the real wheels; the real models are read
by ``test_qwen_models`` where they are installed."""
from __future__ import annotations

import hashlib
import importlib
import sys

import pytest

from nbutils import score_settings
from nbutils.engine.loading import embedded
from nbutils.score_settings import EMBEDDED, QWEN05_MODEL, QWEN15_MODEL, Embedded, model_chat_template


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three part packages (fakegguf_part1..3) on sys.path and an embedded entry that names them, with the sha256
    of their data joined in order."""
    chunks = [b"GGUF" + bytes(range(7)) * 3, b"middle part " * 5, b"the end"]
    for i, chunk in enumerate(chunks, 1):
        pkg = tmp_path / f"fakegguf_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('a data-only part is never imported')\n")
        (pkg / "data" / f"part0{i}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    entry = Embedded("fakegguf_part1", "fake-q4_k_m.gguf", "`pip install fake`", 1000,
                     parts=tuple(f"fakegguf_part{i}" for i in (1, 2, 3)),
                     sha256=hashlib.sha256(b"".join(chunks)).hexdigest(), chat_template="never")
    monkeypatch.setitem(EMBEDDED, "fake-model", entry)
    return tmp_path, chunks


def test_parts_are_found_in_order_joined_and_their_sha256_checked(fake_parts, tmp_path):
    folder, chunks = fake_parts
    files = embedded.part_files("fake-model")
    assert [f.parent.parent.name for f in files] == ["fakegguf_part1", "fakegguf_part2", "fakegguf_part3"]
    assert embedded._parts_sha256("fake-model", files) == EMBEDDED["fake-model"].sha256
    embedded._join(files, tmp_path / "out" / "joined.gguf")
    assert (tmp_path / "out" / "joined.gguf").read_bytes() == b"".join(chunks)
    assert "fakegguf_part1" not in sys.modules, "a part package is found by its folder, never imported"


def test_a_changed_or_missing_part_is_refused_before_anything_loads(fake_parts, monkeypatch):
    folder, _ = fake_parts
    (folder / "fakegguf_part2" / "data" / "part02.bin").write_bytes(b"tampered")
    with pytest.raises(ValueError, match=r"^model: 'fake-model': its installed parts joined in order have sha256 "
                                         r"[0-9a-f]{64}, not the pinned [0-9a-f]{64}; reinstall with `pip install fake`"):
        embedded.load_embedded("fake-model", None)
    (folder / "fakegguf_part3" / "data" / "part03.bin").unlink()
    with pytest.raises(ValueError, match=r"its part package fakegguf_part3 is not one data file; run `pip install fake`"):
        embedded.part_files("fake-model")
    monkeypatch.setitem(EMBEDDED, "fake-model", Embedded("fakegguf_part1", "x.gguf", "`pip install fake`", 1,
                                                        parts=("fakegguf_part1", "no_such_part_package"), sha256="0"))
    with pytest.raises(ValueError, match="its part package no_such_part_package is not installed"):
        embedded.part_files("fake-model")


def test_the_qwen_entries_pin_their_parts_and_sha256_and_read_plain_text_by_default():
    for name, n_parts in ((QWEN05_MODEL, 6), (QWEN15_MODEL, 22)):
        entry = EMBEDDED[name]
        assert len(entry.parts) == n_parts and len(entry.sha256) == 64 and entry.chat_template == "never"
        assert entry.parts[0] == entry.package and entry.parts[-1].endswith(f"part{n_parts}")
    settings = type("S", (), {})
    for model, asked, used in ((QWEN05_MODEL, "auto", "never"), (QWEN05_MODEL, "always", "always"),
                               (score_settings.DEFAULT_MODEL, "auto", "auto"), ("some/hub-model", "auto", "auto")):
        settings.model, settings.chat_template = model, asked
        assert model_chat_template(settings) == used
