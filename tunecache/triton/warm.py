"""The warm start: a process's first call of a key its store answered before, without the store.

A warm process (one that launched its kernel before, or whose kernel module is loaded) meets
its stored keys again. Answering the first of them through the store costs that process about
a dozen modules and SQLite's (`flow`, `state`, `stored`: 8-10 ms on the H200's host, against
0.6-1.1 ms for Triton's whole `cache_results` path). So a process that read answers from the
store keeps them, as it exits, in a small file, and the next process of the same kernel on the
same device reads that file instead, while nothing it depends on has changed:

- *Where*: `<cache root>/triton-warm/<digest>.json`. The digest is of everything that decides
  which store a kernel reads and what key a call makes there: this file's format (`FORMAT`,
  which names the key grammar: a test holds a call's key text, config name and raw key text to
  the ones of its format, so a change to any of them fails until `FORMAT` moves on); the device
  as probed (the GPU's name, compute capability, multiprocessor count, driver and Triton
  versions: what `gpu.gpu_fields` makes the identity of, or the `device=` given); the kernel's
  name, argument names, `key`, `dims` and revision (its source, for `revision="auto"`); and its
  config list, by name. The root is the one the store is under (`root=`,
  `tunecache.configure(root=...)`, `$TUNECACHE_DIR`, or the user cache folder).
- *What*: the store's file, its state (below), the state of the code that kept it
  (`code_witness`), and each answered call by its Triton tuning key (the key arguments' values
  and the tensors' dtypes, as text): the config the store chose (`read_answers` says what a
  file must be to be used).
- *Valid* while the store is in that state: the device, inode, size, modification and change
  time of its database file, and the device, inode, size and modification time of its
  write-ahead log (an absent log and an empty one are the same state: neither holds a page).
  Every write SQLite makes changes one of them (`store_signature` says why the log's change
  time is not among them). Each key new to the process is answered only after the state is
  looked at again (two stats). The state is kept only where the store had not changed in the
  2 s before it was first read (a write within one tick of the file system's clock could
  otherwise look like none: git's "racy" files), nor since.
- *Written* at exit (`atexit`, `kept.py`), by a process that answered keys from its store and
  saw it hold still from its first read to its exit; merged with the valid answers already
  there. A process that tuned or wrote anything changed the store, and writes none: the next
  one that only reads does. A file that cannot be written is left out, silently: it is a cache.
- *Not used* for a kernel with `prune_configs_by` (what is legal depends on the call), with
  `path=` (a store named by its file), with one config, in a process whose writer has
  decisions on their way (`writer` loaded), or with TUNECACHE_TRITON_WARM=0. A call whose key
  is not in the file takes the path it always took (`flow`), which then serves every later
  call too.

What a warm start needs is here and nothing else, so that the first call loads this module
alone where the root is named (the user cache folder's path needs `tunecache.paths` and
platformdirs): the config names and their launch arguments (`config_name`, `all_kwargs`), the
Triton tuning key of a call (`RawKey`, which `keys.KeySpec` extends), the GPU's probe and
driver version, and the root. Everything is stdlib; Triton and torch are the caller's, loaded.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from tunecache.triton.autotuner import Autotuner
    from tunecache.triton.backend import Backend
    from tunecache.triton.configs import Choice
    from tunecache.triton.state import DeviceState

__all__ = [
    "ENV",
    "FOLDER",
    "FORMAT",
    "LAUNCH_FIELDS",
    "MAX_NAME_LEN",
    "SETTLED",
    "FileState",
    "RawKey",
    "Signature",
    "Source",
    "WarmStart",
    "Answers",
    "DATABASE_NAME",
    "MAX_FILE",
    "all_kwargs",
    "as_lists",
    "backend_source",
    "code_witness",
    "config_name",
    "driver_version",
    "gpu_probe",
    "gpu_source",
    "kernel_module_version",
    "kernel_source",
    "loaded_writer",
    "named_root",
    "raw_text",
    "read_answers",
    "read_json",
    "store_signature",
    "switched_off",
    "torch_module",
    "triton_module",
    "triton_unhashed",
    "value_text",
]

#: the environment variable that turns the warm start off ("0", "off", "false", "no")
ENV = "TUNECACHE_TRITON_WARM"
#: the folder of the answers' files, under the cache root
FOLDER = "triton-warm"
#: the format of an answers' file, and of the key texts it answers for: moved on whenever
#: `config_name`, `raw_text` or `keys.KeySpec.make` write another text for the same call (not
#: tunecache's version: reading it would cost a warm start's first call one module more)
FORMAT = 1
#: a store written this recently (seconds) before its first read keeps no answers' file: a
#: change within the same timestamp tick could look like no change
SETTLED = 2.0

#: `tunecache.candidates.MAX_NAME_LEN`, spelled out so that naming a config imports neither
#: the candidate lists nor their digest (a test keeps the two equal)
MAX_NAME_LEN = 200

#: the launch options of a `triton.Config`, in the order they appear in a config's name
LAUNCH_FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


# -- configs ------------------------------------------------------------------------------------


#: the values `value_text` writes by repr (a tuple: `bool | int | float | str` is a new union
#: object each time it is evaluated, and a warm start's first call names every config)
_REPR_TYPES = (bool, int, float, str, type(None))


def value_text(value: object) -> str:
    """One meta-parameter value as text: Python literals by repr (so 1, True, '1' differ)."""
    return repr(value) if isinstance(value, _REPR_TYPES) else str(value)


def config_name(config: Any) -> str:
    """The identity of a `triton.Config`: its meta-parameters sorted by name, then its launch
    options, as `BLOCK_M=128,BLOCK_N=64,num_warps=4,num_stages=3,num_ctas=1`.

    Two configs with the same name launch the same kernel the same way. A config's own
    `pre_hook` is named by its qualified name; a name over MAX_NAME_LEN characters is cut and
    ends in a digest of the whole text, so it stays unique.
    """
    kwargs = getattr(config, "kwargs", None)
    if not isinstance(kwargs, Mapping):
        from tunecache.errors import BadArgumentError

        raise BadArgumentError(
            "a config is a triton.Config (with .kwargs and .num_warps), "
            f"got {type(config).__name__}"
        )
    parts = [f"{name}={value_text(kwargs[name])}" for name in sorted(kwargs, key=str)]
    for field in LAUNCH_FIELDS:
        value = getattr(config, field, None)
        if value is not None:
            parts.append(f"{field}={value_text(value)}")
    override = getattr(config, "ir_override", None)
    if override is not None:
        parts.append(f"ir_override={value_text(override)}")
    hook = getattr(config, "pre_hook", None)
    if hook is not None:
        parts.append(f"pre_hook={getattr(hook, '__qualname__', type(hook).__qualname__)}")
    text = ",".join(parts) or "default"
    if len(text) > MAX_NAME_LEN or not text.isprintable():
        from tunecache._digest import sha256

        digest = sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
        shown = "".join(c if c.isprintable() else "?" for c in text)
        text = f"{shown[: MAX_NAME_LEN - 18]}~{digest}"
    return text


def all_kwargs(config: Any) -> dict[str, Any]:
    """The keyword arguments that launch a config: Triton's `Config.all_kwargs()`."""
    method = getattr(config, "all_kwargs", None)
    if callable(method):
        return dict(method())
    out = dict(config.kwargs)
    for field in ("num_warps", "num_ctas", "num_stages", "maxnreg", "ir_override"):
        value = getattr(config, field, None)
        if value is not None:
            out[field] = value
    return out


# -- a call's key -------------------------------------------------------------------------------


def kernel_source(fn: Any) -> str | None:
    """The source text of a `@triton.jit` kernel (under any `@triton.heuristics`), or None."""
    inner = fn
    while inner is not None and getattr(inner, "src", None) is None:
        inner = getattr(inner, "fn", None)
    source = getattr(inner, "src", None)
    return source if isinstance(source, str) else None


class RawKey:
    """A call's Triton tuning key, as a hashable tuple (`raw`): what a kernel's answers are
    remembered by, in memory and in its answers' file. `keys.KeySpec` extends it with the
    tunecache key."""

    def __init__(self, arg_names: Any, key: Any) -> None:
        names = list(arg_names)
        self.arg_names = tuple(names)
        self.arg_set = frozenset(names)
        self.key = tuple(key)
        #: (position among the arguments, name) of each key argument, in key order
        self.positions = tuple((names.index(k), k) for k in key)

    def raw(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
        """Triton's tuning key for a call, as a hashable tuple: the values of the key arguments
        that were passed, then the dtype of every argument that has one (positional first).

        This runs on every call: no allocation beyond the tuple, no string formatting.
        """
        n = len(args)
        out = [
            args[i] if i < n else kwargs[name]
            for i, name in self.positions
            if i < n or name in kwargs
        ]
        for a in args[: len(self.arg_names)]:
            d = getattr(a, "dtype", None)
            if d is not None:
                out.append(d)
        if kwargs:
            for name, a in kwargs.items():
                if name in self.arg_set:
                    d = getattr(a, "dtype", None)
                    if d is not None:
                        out.append(d)
        return tuple(out)


#: the types a raw key's value is written as itself (its repr); anything else (a dtype) is its
#: type's qualified name and its text
_LITERALS = (int, bool, float, str, type(None))


def raw_text(raw: tuple[Any, ...]) -> str:
    """A raw key as text, the same in every process for the same key: literals by repr, a
    dtype (or any other value) by its type and its text, `torch.float16` as
    `('torch.dtype', 'torch.float16')`."""
    return repr(
        tuple(
            value
            if type(value) in _LITERALS
            else (f"{type(value).__module__}.{type(value).__qualname__}", str(value))
            for value in raw
        )
    )


# -- the device ---------------------------------------------------------------------------------


def triton_module() -> Any:
    """Triton, imported (a decorated kernel's first call needs it); BadArgumentError without."""
    import importlib

    try:
        # import_module: Triton and torch ship no type information, and need not be installed.
        return importlib.import_module("triton")
    except ImportError as error:
        from tunecache.errors import BadArgumentError

        raise BadArgumentError(
            f"tunecache.triton.autotune needs Triton to decorate a kernel: {error}"
        ) from None


def torch_module() -> Any:
    """torch, imported; BadArgumentError without."""
    import importlib

    try:
        return importlib.import_module("torch")
    except ImportError as error:
        from tunecache.errors import BadArgumentError

        raise BadArgumentError(f"tunecache.triton needs torch for the GPU: {error}") from None


def _leading_version(text: str) -> str | None:
    """The run of digits and dots `text` starts with, if it starts with a digit."""
    if not text[:1].isdigit() or not text[:1].isascii():
        return None
    end = next((i for i, c in enumerate(text) if c not in "0123456789."), len(text))
    return text[:end]


def kernel_module_version(text: str) -> str | None:
    r"""The driver's version in /proc/driver/nvidia/version's text ("NVRM version: NVIDIA UNIX
    Open Kernel Module for x86_64  580.159.04  Release Build ..."), or None: what
    `re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]*)", text)` finds, in str methods
    (compiling that pattern cost each process's first call about 0.1 ms)."""
    at = text.find("Kernel Module")
    while at >= 0:
        rest = text[at + len("Kernel Module") :]
        after = rest.lstrip()
        if after != rest:
            found = _leading_version(after)
            if found is None and after.startswith("for "):
                word = after[len("for ") :]
                end = next((i for i, c in enumerate(word) if c.isspace()), len(word))
                tail = word[end:]
                if end and tail.lstrip() != tail:
                    found = _leading_version(tail.lstrip())
            if found is not None:
                return found
        at = text.find("Kernel Module", at + 1)
    return None


def driver_version() -> str:
    """The GPU driver's version ("580.159.04"), or the CUDA driver API's ("cuda-13.0")."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            found = kernel_module_version(fh.read())
        if found:
            return found
    except OSError:
        pass
    torch = torch_module()
    hip = getattr(torch.version, "hip", None)
    if hip:
        return f"hip-{hip}"
    # torch's own private binding: torch has no public call for the CUDA driver API's
    # version (cudaDriverGetVersion), and this fallback runs only where /proc has none.
    get = getattr(torch._C, "_cuda_getDriverVersion", None)
    if callable(get):
        number = int(get())
        return f"cuda-{number // 1000}.{number % 1000 // 10}"
    return "unknown"


def gpu_probe(index: int) -> tuple[str, int, int, int, str, str]:
    """What GPU `index`'s identity is made of (`gpu.gpu_fields` makes it of these): its name,
    compute capability (major, minor), multiprocessor count, driver and Triton versions."""
    props = torch_module().cuda.get_device_properties(index)
    return (
        str(props.name),
        int(props.major),
        int(props.minor),
        int(props.multi_processor_count),
        driver_version(),
        str(triton_module().__version__),
    )


class Source:
    """How the warm start sees a kernel's devices without its backend: the current device's
    number, a device's probe (what its identity is made of, as JSON values: equal probes make
    equal identities) and the client its store is kept for, from the probe."""

    __slots__ = ("client", "current", "probe")

    def __init__(
        self,
        current: Callable[[], int],
        probe: Callable[[int], tuple[Any, ...]],
        client: Callable[[tuple[Any, ...]], str],
    ) -> None:
        self.current, self.probe, self.client = current, probe, client


def gpu_source(device: Any) -> Source:
    """The decorator's GPU backend as the warm start sees it: torch's current device, probed
    (`gpu_probe`), or the identity `device=` gave (a `tunecache.Device`)."""
    torch = torch_module()
    if device is not None:
        fields, client = tuple(device.fields), str(device.client)
        return Source(torch.cuda.current_device, lambda index: fields, lambda probe: client)
    return Source(torch.cuda.current_device, gpu_probe, lambda probe: "triton")


def backend_source(backend: Backend) -> Source:
    """A backend given to the kernel (a CPU one, in the tests) as the warm start sees it: its
    identity's fields are the probe, and name the client."""

    def probe(index: int) -> tuple[Any, ...]:
        found = backend.fields(index) if backend.fields is not None else None
        return tuple(found if found is not None else backend.device(index).fields)

    return Source(backend.current, probe, lambda fields: str(fields[3]))


def triton_unhashed() -> bool:
    """Whether this process's Triton has yet to hash its installation: a look at its
    `triton_key`'s lru_cache, nothing imported (tunecache.triton.jitkey loads only then)."""
    found = getattr(sys.modules.get("triton.runtime.cache"), "triton_key", None)
    info = getattr(found, "cache_info", None)
    return callable(info) and info().currsize == 0


def loaded_writer() -> Any:
    """This process's writer (`tunecache.triton.writer.WRITER`) if its module is loaded, else
    None: then nothing was queued, and a warm process that only meets stored keys never loads
    it (nor, asking this, the store's modules: `Autotuner.wait_pending`)."""
    module = sys.modules.get("tunecache.triton.writer")
    return None if module is None else module.WRITER


# -- the store's state and the root ------------------------------------------------------------

#: a file's state: (device, inode, size, modification time[, change time]), times in ns
FileState = tuple[int, ...]
#: the store's state: its database file's, and its write-ahead log's (None: absent or empty)
Signature = tuple[FileState | None, FileState | None]


def _file_state(path: str, changed: bool) -> FileState | None:
    try:
        found = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the name (from a damaged file)
        return None
    state = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)
    return (*state, found.st_ctime_ns) if changed else state


def store_signature(db: str | os.PathLike[str]) -> Signature:
    """The store's state as the warm start compares it: its database file's (None: none) and
    its write-ahead log's, an empty log the same as none (neither holds a page).

    The log's change time is left out: SQLite, run as root, gives the log its database's owner
    each time a connection opens it (a change of its change time, nothing written), so every
    reader would make the state new. Its modification time moves with each frame written; a
    time set back by hand (a restored copy of a log) is the one change this misses, as it is
    for any tool that trusts modification times (make, rsync)."""
    name = os.fspath(db)
    log = _file_state(name + "-wal", changed=False)
    return (_file_state(name, changed=True), log if log is not None and log[2] > 0 else None)


def named_root(given: Any) -> Any:
    """`tunecache.config.root(given)`'s root: the argument, else the one `configure()` set,
    else $TUNECACHE_DIR; None for the default (the user cache folder). tunecache.config is
    asked only where it is loaded: where it is not, nothing configured a root (a test holds
    the two to the same answers)."""
    config = sys.modules.get("tunecache.config")
    if config is not None:
        return config.root(given)[0]
    if given is not None:
        return given
    return os.environ.get("TUNECACHE_DIR") or None


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file's value, or None where it is missing, unreadable, not a regular file (a FIFO
    would block the open: it is opened without blocking, and looked at first) or not JSON. The
    read side of `jsonfile`, here so that a warm start loads nothing more."""
    import json

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_size > MAX_FILE:
            return None  # a device would read forever, a huge file fill the memory
        with open(fd, "rb", closefd=False) as fh:
            # At most what fstat said, and one byte: a file growing meanwhile reads as cut
            # short (not JSON); a size given to read() is a buffer made at once.
            return json.loads(fh.read(found.st_size + 1))
    except (OSError, ValueError, RecursionError, MemoryError):
        return None  # RecursionError: "[" nested deeper than the parser goes
    finally:
        os.close(fd)


def switched_off(variable: str) -> bool:
    """Whether the environment variable `variable` turns a feature off ("0", "off", "false",
    "no", any case, spaces around): this module's `ENV`, `jitkey.ENV`."""
    return os.environ.get(variable, "").strip().lower() in ("0", "off", "false", "no")


# -- a kernel's warm start ----------------------------------------------------------------------


#: the largest answers' file read (bytes): a kernel's thousands of keys take a few hundred KiB
MAX_FILE = 8 << 20


def code_witness() -> list[int]:
    """The state of the code that made an answers' file: inode, size and modification time of
    this module and of tunecache's version file. An upgrade or reinstall (which may move the
    store, or change how it answers) rewrites both; a file of other code is not used. Two
    stats: no module more."""
    here = os.path.abspath(__file__)
    out: list[int] = []
    for name in (here, os.path.join(os.path.dirname(here), "..", "_version.py")):
        try:
            found = os.stat(name)
        except OSError:
            out += [0, 0, 0]
        else:
            out += [found.st_ino, found.st_size, found.st_mtime_ns]
    return out


def read_answers(
    file: str, root: str, names: Any
) -> tuple[str, list[list[int] | None], dict[str, str]] | None:
    """An answers' file's store, the store's state it was kept in and its answers, where they
    speak for that store as it is now; None otherwise. Its store must be a device's file under
    `root` (`<root>/tune/<version>/<device>/cache.db`: a copied root's file names the original's
    store, a nested root's another's), in the state kept, by the code that kept it, answering
    configs among `names`."""
    data = read_json(file)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    store, recorded, answers = data.get("store"), data.get("signature"), data.get("answers")
    if not isinstance(store, str) or not isinstance(answers, dict):
        return None
    parts = store[len(root) :].split(os.sep)
    if (
        not store.startswith(root)
        or len(parts) != 5
        or parts[:2] != ["", "tune"]
        or parts[4] != DATABASE_NAME
        or not {"", ".", ".."}.isdisjoint(parts[2:4])
        or data.get("code") != code_witness()
    ):
        return None
    signature = as_lists(store_signature(store))
    if signature[0] is None or signature != recorded:
        return None
    if not all(
        isinstance(k, str) and isinstance(v, str) and v in names for k, v in answers.items()
    ):
        return None
    return store, signature, answers


#: `tunecache.paths.DATABASE_NAME`, spelled out (a test keeps the two equal)
DATABASE_NAME = "cache.db"


class Answers:
    """One device's answers for a kernel: its file, the store the file speaks for and that
    store's state, what the file answered in this process, and what the store did (kept at
    exit by `kept.py`, which holds these alone: never the kernel, nor its store)."""

    __slots__ = (
        "answers",
        "file",
        "fresh",
        "kept",
        "learned",
        "memo",
        "names",
        "reader",
        "root",
        "signature",
        "store",
    )

    def __init__(self, file: str | None, root: str, names: Any) -> None:
        self.file, self.root, self.names = file, root, names
        #: the store the file's answers are of, and its state then (None: no valid file)
        self.store: str | None = None
        self.signature: list[list[int] | None] | None = None
        #: raw key text -> config name, from the file (while valid)
        self.answers: dict[str, str] = {}
        #: whether the store's state was checked since the last answer taken from the file
        self.fresh = False
        #: raw key -> choice, answered so far in this process through the file
        self.memo: dict[tuple[Any, ...], Choice] = {}
        #: raw key text -> config name, answered by the store in this process (`learn`)
        self.learned: dict[str, str] = {}
        #: the store's reader's path, state and time of its first look (`StoreReader`), once
        #: it answered a key
        self.reader: tuple[str, Signature, float] | None = None
        #: whether `kept` writes it at exit
        self.kept = False

    def read(self) -> None:
        """Take the file's answers where they speak for the store as it is now."""
        found = None if self.file is None else read_answers(self.file, self.root, self.names)
        if found is not None:
            self.store, self.signature, self.answers = found
            self.fresh = True


class WarmStart:
    """A kernel's warm start: its answers' files per device, read at its first call, and what
    its flow learns from the store, written at exit. `lock` is the kernel's, held while a
    device's file is first read and while an answer is taken from it."""

    def __init__(self, kernel: Autotuner, source: Source, lock: Any) -> None:
        options = kernel.options
        self.kernel, self.source, self.lock = kernel, source, lock
        self.raw = RawKey(kernel.arg_names, options.key).raw
        #: config name -> config, in order, duplicates dropped
        self.by_name: dict[str, Any] = options.named_configs
        self.devices: dict[int, Answers] = {}
        self._roots: dict[str, str | None] = {}
        self._choices: dict[str, Choice] = {}

    @classmethod
    def start(cls, kernel: Autotuner, source: Source, lock: Any) -> WarmStart | None:
        """The kernel's warm start, or None where it has none (see the module's text)."""
        options = kernel.options
        if (
            switched_off(ENV)
            or options.path is not None
            or options.early_prune is not None
            or options.perf_model is not None
            or len(options.given_configs) < 2
        ):
            return None
        return cls(kernel, source, lock)

    def _root(self, client: str) -> str | None:
        """The cache root of `client`'s store, as `paths.cache_root` makes it (None: an empty
        root, which the flow refuses in its words)."""
        if client not in self._roots:
            named = named_root(self.kernel.options.root)
            if named is None:
                # The user cache folder: platformdirs (about 5 ms to import; a root named by
                # root=, configure() or $TUNECACHE_DIR costs nothing).
                from tunecache.paths import cache_root

                self._roots[client] = str(cache_root(client))
            elif not os.fspath(named):
                self._roots[client] = None
            else:
                self._roots[client] = str(Path(named).expanduser().absolute())
        return self._roots[client]

    def _file(self, index: int) -> tuple[str | None, str]:
        """Device `index`'s answers' file (None: no root a store can be under) and its root."""
        kernel, options = self.kernel, self.kernel.options
        probe = list(self.source.probe(index))
        client = self.source.client(tuple(probe))
        root = self._root(client)
        if root is None:
            return None, ""
        import json

        revision = options.revision
        what = json.dumps(
            [
                FORMAT,
                client,
                probe,
                kernel.op,
                list(kernel.arg_names),
                list(options.key),
                options.dims,
                ["source", kernel_source(kernel.fn)] if revision == "auto" else revision,
                list(self.by_name),
            ]
        )
        # hashlib's where it is loaded (torch and Triton load it): `_digest` is one module more.
        hashlib = sys.modules.get("hashlib")
        if hashlib is not None:
            sha256 = hashlib.sha256
        else:
            from tunecache._digest import sha256
        digest = sha256(what.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        return os.path.join(root, FOLDER, f"{digest}.json"), root

    def device(self, index: int, read: bool = True) -> Answers:
        """Device `index`'s answers, its file read when first asked (unless not `read`)."""
        found = self.devices.get(index)
        if found is not None:
            return found
        with self.lock:
            found = self.devices.get(index)
            if found is None:
                found = Answers(*self._file(index), self.by_name)
                # A writer with decisions on their way: the store is about to change.
                if read and found.file is not None and loaded_writer() is None:
                    found.read()
                    if found.store is not None and triton_unhashed():
                        # Before this process's first launch, as the flow's store does it:
                        # Triton's installation hash from the file beside the store.
                        from tunecache.triton import jitkey

                        jitkey.remember(Path(found.store).parent)
                self.devices[index] = found
            return found

    def choice(self, index: int, raw: tuple[Any, ...]) -> Choice | None:
        """The choice the file answers for this call on device `index`, or None."""
        device = self.devices.get(index)
        if device is None:
            device = self.device(index)
        try:
            found = device.memo.get(raw)
        except TypeError:  # a key argument's value is not hashable: the flow says so
            device.fresh = False
            return None
        if found is not None or not device.answers:
            return found
        name = device.answers.get(raw_text(raw))
        if name is None:
            # The store's state was checked for the call that read the file, this one: a
            # later key is checked again, however soon it comes.
            device.fresh = False
            return None
        with self.lock:
            found = device.memo.get(raw)
            if found is not None:
                return found
            if not device.fresh:
                # A key new to this process: answered only while the store is still in the
                # state the file was kept in (another process may have written it since).
                assert device.store is not None
                if as_lists(store_signature(device.store)) != device.signature:
                    device.answers = {}
                    return None
            device.fresh = False
            found = self._choices.get(name)
            if found is None:
                config = self.by_name[name]
                found = (config, all_kwargs(config), getattr(config, "pre_hook", None))
                self._choices[name] = found
            device.memo[raw] = found
            self.kernel.stats["exact"] += 1
            return found

    def answered(self, index: int) -> dict[tuple[Any, ...], Choice]:
        """What device `index`'s file answered in this process (the flow's memo starts so)."""
        with self.lock:
            device = self.devices.get(index)
            return {} if device is None else dict(device.memo)

    # -- what the flow learns, written at exit ------------------------------------------------

    def learn(
        self, state: DeviceState, raw: tuple[Any, ...], name: str, names: tuple[str, ...]
    ) -> None:
        """A key the store answered on `state`'s device, through its reader, for the config
        list `names`: kept for the device's file, written at exit (`kept.write_learned`), where
        that list is the one the file is named by (`kernel.configs` set since changes it).
        Never raises: the caller is a launch, and the file a cache."""
        try:
            if names != tuple(self.by_name):
                return
            reader = state.reader
            if reader.path is None or reader.signature is None:
                return
            device = self.device(state.index, read=False)
            if device.file is None:
                return
            if device.reader is None:
                device.reader = (os.fspath(reader.path), reader.signature, reader.signed_at)
            device.learned[raw_text(raw)] = name
            if not device.kept:
                from tunecache.triton import kept

                kept.keep(device)
        except Exception:
            return


def as_lists(signature: Signature) -> list[list[int] | None]:
    """A signature as JSON keeps it."""
    return [None if s is None else list(s) for s in signature]
