"""The layers as built (docs/DESIGN.md, "Layers"): the core never imports Lightning, nothing patches the
import system, and importing the package registers the strategies the ordinary way."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import lightning_shard

PACKAGE = Path(lightning_shard.__file__).parent
CORE = [path for path in PACKAGE.rglob("*.py") if "lightning" not in path.relative_to(PACKAGE).parts[:-1]]


def _imported(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
    return names


def test_core_modules_do_not_import_lightning() -> None:
    # NOTE: the package and `ray.py` are entry points: they import the adapter (Lightning, Ray) on purpose.
    core = [path for path in CORE if path not in (PACKAGE / "__init__.py", PACKAGE / "ray.py")]
    assert len(core) > 15, "the core modules were found"
    for path in core:
        imported = _imported(path)
        assert not any(name.split(".")[0] in ("lightning", "pytorch_lightning") for name in imported), path
        assert "lightning_shard.lightning" not in imported, path


def _package_imports(path: Path) -> set[str]:
    """The ``lightning_shard`` modules ``path`` imports anywhere (top level, functions, ``TYPE_CHECKING``)."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            package = module.rsplit(".", node.level)[0]
            names = [f"{package}.{node.module}" if node.module else package]
        elif isinstance(node, ast.ImportFrom):
            # NOTE: `from lightning_shard.loaders import base` imports the module `base`.
            names = [node.module or "", *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {name for name in names if name.startswith("lightning_shard")}
    return found


def test_no_import_circles() -> None:
    """docs/DESIGN.md, "Layers": every module's imports form no circle, also through a function's import."""
    modules = {
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): path
        for path in PACKAGE.rglob("*.py")
    }
    # NOTE: a package's `__init__` re-exports its modules, so arrows into a package are left out (a module
    # that imports `lightning_shard.lightning.x` runs that package's `__init__`, which is an entry point).
    graph = {
        name: {imported for imported in _package_imports(path) if imported in modules and imported != name}
        for name, path in modules.items()
        if not path.name == "__init__.py"
    }
    graph = {name: {target for target in targets if target in graph} for name, targets in graph.items()}
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100, "the imports were read"
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        if name in done:
            return
        assert name not in visiting, (
            f"an import circle: {' -> '.join([*visiting[visiting.index(name) :], name])}"
        )
        visiting.append(name)
        for target in sorted(graph[name]):
            visit(target)
        visiting.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


def test_one_writer_of_the_epoch_position() -> None:
    """docs/DESIGN.md, "No singleton": only ``Resumption`` (``loaders/resumable.py``) moves a loader's live
    ``Position`` and finishes its epochs; the loaders only produce batches."""
    writers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            targets += [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                    owner = ast.unparse(part.value) if isinstance(part, ast.Attribute) else ""
                    if owner.split(".")[-1] in ("position", "progress", "restore", "pending"):
                        writers.add(path.relative_to(PACKAGE).as_posix())
        if "finish_epoch()" in path.read_text():
            writers.add(path.relative_to(PACKAGE).as_posix())
    assert writers == {"loaders/resumable.py"}, writers


def test_no_import_machinery() -> None:
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert "__getattr__" not in functions, f"a module `__getattr__` in {path}"
        assert "meta_path" not in path.read_text(), path
        assert "importlib" not in _imported(path), path


def test_the_package_top_is_small_and_layered() -> None:
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(modules) <= 8, modules
    assert {path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"} == {
        "sampling", "loaders", "comm", "lightning"
    }  # fmt: skip


def test_import_registers_the_strategies() -> None:
    script = (
        "import lightning_shard\n"
        "from lightning.pytorch.strategies import StrategyRegistry\n"
        "assert {'shard', 'shard_spawn'} <= set(StrategyRegistry)\n"
        "import lightning.pytorch as pl\n"
        "trainer = pl.Trainer(strategy='shard', devices=2, accelerator='cpu', logger=False)\n"
        "assert type(trainer.strategy).__name__ == 'ShardStrategy'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


SEED_NAMES = {
    "prepare_data_loader", "skip_first_batches", "BatchSamplerShard", "IterableDatasetShard", "DataLoaderShard",
    "DataLoaderDispatcher", "StatefulDataLoaderShard", "StatefulDataLoaderDispatcher", "SeedableRandomSampler",
    "SkipBatchSampler", "ShardOptimizer", "ShardScheduler",
}  # fmt: skip
LIGHTNING_ENTRY_POINTS = {
    "ShardStrategy", "ShardModelParallelStrategy", "ShardFSDPStrategy", "ShardFabricStrategy", "ShardDataModule",
    "ShardPredictionWriter", "ShardPlan", "ShardOptions",
}  # fmt: skip
MOVED = {
    "Consumed": "lightning_shard.loaders.position",
    "ResumeHook": "lightning_shard.loaders.position",
    "NativeStreamShard": "lightning_shard.sampling.native_stream",
    "StreamReport": "lightning_shard.loaders.streams",
    "StrategyOptions": "lightning_shard.options",
    "stateful_loader_class": "lightning_shard.loaders.base",
}


def test_the_top_level_is_the_seed_the_entry_points_and_what_users_write() -> None:
    exported = set(lightning_shard.__all__)
    assert SEED_NAMES | LIGHTNING_ENTRY_POINTS <= exported
    assert all(hasattr(lightning_shard, name) for name in exported)
    assert len(exported) <= 27, sorted(exported - SEED_NAMES - LIGHTNING_ENTRY_POINTS)
    for name, module in MOVED.items():
        assert name not in exported and not hasattr(lightning_shard, name), name
        assert hasattr(__import__(module, fromlist=[name]), name), (name, module)
    assert not hasattr(lightning_shard, "ShardingMixin")


_KIND_TYPES = {
    "Dataset", "IterableDataset", "IterableDatasetShard", "NativeStreamShard", "ShardableStream",
    "BaseNode", "Loader", "SamplerWrapper", "IterableWrapper", "MultiNodeWeightedSampler",
    "Sampler", "BatchSampler", "RandomSampler", "SequentialSampler", "DistributedSampler", "BatchSamplerShard",
    "SeekableBatchSampler", "SampleShard", "SeedableRandomSampler", "BatchSamplerWrapper", "EpochCursor",
    "OwnOrder", "KnowsKind", "DataLoader", "StatefulDataLoader", "ResumableLoader", "DataLoaderShard",
    "DataLoaderDispatcher",
}  # fmt: skip
"""Datasets, samplers and loaders, torch's, torchdata's and ours: an ``isinstance`` against one decides a kind."""
_PARTS = ("dataset", "sampler", "shard", "cursor", "iterable", "order")
"""Names of what a kind is made of: a ``getattr`` / ``hasattr`` / ``type()`` of one probes it, and a loader's
missing ``cursor``, ``sampler`` or ``batch_sampler`` read as a kind infers one."""
_MISSING = ("cursor", "sampler", "batch_sampler")
_RECOGNISERS = {
    "is_hugging_face",
    "is_node_graph",
    "read_graph",
    "classify_iterable",
    "self_split",
    "recognise",
    "declared",
    "classify",
    "sampler_kind",
    "wrapped_kind",
}
_CLASSIFIERS = {
    "loaders/kinds.py": None,
    "sampling/samplers.py": {"sampler_kind", "wrapped_kind", "dataset_generator"},
}
"""The classifiers: a whole module, or functions of one."""
_LIBRARY_MODULES = {
    "sampling/self_split.py", "sampling/litdata_stream.py", "sampling/webdataset_stream.py", "sampling/mosaic_stream.py",
    "sampling/torchdata_nodes.py",
}  # fmt: skip


def _subject(node: ast.AST) -> bool:
    return any(part in ast.unparse(node).lower() for part in _PARTS)


def _named(call: ast.Call) -> bool:
    """Whether a ``getattr`` / ``hasattr`` names the part it looks for (a name passed in forwards an attribute
    asked for, as ``__getattr__`` does: no decision)."""
    return len(call.args) >= 2 and isinstance(call.args[1], ast.Constant)


def _inspections(tree: ast.AST, skip: set[str] | None = None) -> list[str]:
    """What ``tree`` does that decides a kind (of data, sampler or loader), outside the functions ``skip``:
    ``isinstance`` against a dataset, sampler or loader class, a call of a recogniser, ``type(x) is``, a
    ``getattr`` / ``hasattr`` probe of a part, a kind inferred from a missing part."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in (skip or ()):
            skipped |= {id(inner) for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Compare):
            found += _compared(node)
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name == "isinstance" and len(node.args) == 2:
            types = {getattr(n, "id", getattr(n, "attr", "")) for n in ast.walk(node.args[1])}
            found += [f"isinstance(..., {kind})" for kind in sorted(types & _KIND_TYPES)]
        elif name in _RECOGNISERS:
            found.append(f"{name}(...)")
        elif name in ("getattr", "hasattr") and _named(node) and _subject(node.args[0]):
            found.append(f"{name}({ast.unparse(node.args[0])}, {ast.unparse(node.args[1])})")
        elif name in ("getattr", "hasattr") and any(
            isinstance(arg, ast.Constant) and arg.value == "splits_by_rank" for arg in node.args
        ):
            found.append("splits_by_rank")
    return found


def _compared(node: ast.Compare) -> list[str]:
    left, right = node.left, node.comparators[0]
    if isinstance(left, ast.Call) and getattr(left.func, "id", "") == "type" and _subject(left):
        return [f"{ast.unparse(left)} is ..."]
    missing = (
        isinstance(right, ast.Constant)
        and right.value is None
        and isinstance(node.ops[0], (ast.Is, ast.IsNot))
    )
    loaders = isinstance(left, ast.Attribute) and (
        left.attr == "cursor" or "loader" in ast.unparse(left.value)
    )
    if missing and loaders and left.attr in _MISSING:
        return [f"{ast.unparse(left)} is None"]
    return []


def test_only_the_classifiers_decide_a_kind() -> None:
    """docs/DESIGN.md, "Kinds of data": one function decides what kind of data a loader holds (``classify``),
    one what the user's sampler is (``sampler_kind``), and nothing after inspects a dataset, sampler or loader
    to find it out again: no ``isinstance`` against their classes, ``type(x) is``, ``getattr`` / ``hasattr``
    probe, or kind inferred from a missing part, outside them and the libraries' own recognising modules
    (``prepare.py`` and the constructors of a directly built loader call ``classify``, the one entry point).
    An ability is asked as an ``isinstance`` against an abstract one (``Sized``), an attribute forwarded by a
    name passed in (``__getattr__``) is not a probe."""
    callers = {
        "prepare.py": {"classify(...)", "classify_iterable(...)"},
        "loaders/shard.py": {"classify(...)"},
        "lightning/sharding.py": {"classify_iterable(...)"},
        "sampling/own_sampler.py": {"sampler_kind(...)"},
        "sampling/batch_shard.py": {"sampler_kind(...)"},
        "sampling/samplers.py": {"sampler_kind(...)", "wrapped_kind(...)"},
    }
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE).as_posix()
        if name in _LIBRARY_MODULES or (name in _CLASSIFIERS and _CLASSIFIERS[name] is None):
            continue
        inspections = set(_inspections(ast.parse(path.read_text()), _CLASSIFIERS.get(name))) - callers.get(
            name, set()
        )
        if inspections:
            found[name] = sorted(inspections)
    assert found == {}, found


def test_an_inspection_is_found() -> None:
    code = (
        "isinstance(d, (int, IterableDataset))\nself_split(d)\ngetattr(d, 'splits_by_rank', None)\n"
        "hasattr(loader.sampler, 'generator')\ntype(user_sampler) is RandomSampler\nloader.cursor is None\n"
        "isinstance(x, DataLoaderDispatcher)\ntype(row) is int\ngetattr(self.iterable, name)\n"
    )
    assert sorted(_inspections(ast.parse(code))) == sorted(
        [
            "isinstance(..., IterableDataset)",
            "self_split(...)",
            "splits_by_rank",
            "hasattr(loader.sampler, 'generator')",
            "type(user_sampler) is ...",
            "loader.cursor is None",
            "isinstance(..., DataLoaderDispatcher)",
        ]
    )


def test_the_package_imports_where_torchdata_has_no_nodes() -> None:
    """torchdata.nodes exists from torchdata 0.10; the package supports 0.8 on (``make test-oldest``), so only
    the code that reads a graph imports it. Here its absence is simulated in a fresh interpreter."""
    code = (
        "import sys; sys.modules['torchdata.nodes'] = None\n"
        "import lightning_shard, lightning_shard.lightning, lightning_shard.loaders.source\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=Path(__file__).parents[2])
