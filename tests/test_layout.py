"""The package layout of ARCHITECTURE.md: imports point down the layers and never form a cycle.

The graph is read from the source (every `import`, including the lazy ones inside functions), so
an import added anywhere that climbs back up a layer, or closes a cycle, fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mvs_pipeline"

# Top-level modules and packages of mvs_pipeline, lowest layer first. A module may import its own
# group and groups of lower layers only; groups sharing a layer do not import each other.
LAYERS = [
    ("__init__", "errors", "paths", "field_meta", "arrays", "background"),
    ("io", "gpu", "interrupts"),
    ("scene", "synth", "cluster"),
    ("views",),
    ("depth",),
    ("fusion",),
    ("sampling",),
    ("mesh",),
    ("evaluation",),
    ("config",),
    ("fingerprints", "output_space", "backend_start"),
    ("pipeline",),
    ("compile_ahead",),
    ("commands",),
    ("cli",),
    ("__main__",),
]
RANK = {group: rank for rank, groups in enumerate(LAYERS) for group in groups}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (a `from pkg import sub` names the submodule)."""
    files = {module_name(f): f for f in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        edges = graph.setdefault(mod, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in files)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module
                for a in node.names:
                    if f"{target}.{a.name}" in files:
                        edges.add(f"{target}.{a.name}")
                    elif target in files:
                        edges.add(target)
        edges.discard(mod)
    return graph


def group_of(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_top_level_module_has_a_layer():
    groups = {group_of(m) for m in import_graph()}
    assert groups <= set(RANK), f"add these to LAYERS (and ARCHITECTURE.md): {sorted(groups - set(RANK))}"


def test_no_import_points_back_up_the_layers():
    upward = sorted(f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
                    if group_of(a) != group_of(b) and RANK[group_of(b)] >= RANK[group_of(a)])
    assert upward == []


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles = []

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for nxt in sorted(graph.get(mod, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]) if nxt in path else nxt)
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert cycles == []


def test_the_graph_sees_lazy_and_relative_imports():
    """Guards the checker itself: known edges of each kind must be found."""
    graph = import_graph()
    assert "mvs_pipeline.depth.stage" in graph["mvs_pipeline.pipeline"]  # lazy, inside a function
    assert "mvs_pipeline.depth.patchmatch.cpu" in graph["mvs_pipeline.depth.patchmatch.cpu_solver"]  # from . import
    assert "mvs_pipeline.gpu.loader" in graph["mvs_pipeline.depth.patchmatch.cuda"]  # absolute
    assert "mvs_pipeline.config.schema" in graph["mvs_pipeline.config.loader"]


def test_the_cuda_path_imports_no_numba():
    """Numba's import costs 0.2-0.4 s of every GPU run (session 7's profile; docs/decisions.md, "What
    was kept and dropped outside the stages"): the modules a CUDA run loads for its depth, fusion and
    sampling stages import the Numba twins only inside the CPU branches."""
    import subprocess
    import sys

    modules = ["mvs_pipeline.cli", "mvs_pipeline.pipeline", "mvs_pipeline.depth.stage", "mvs_pipeline.fusion.stage",
               "mvs_pipeline.fusion.cuda", "mvs_pipeline.depth.patchmatch.cuda_solver",
               "mvs_pipeline.depth.scale_ops.ops", "mvs_pipeline.io.vis_file", "mvs_pipeline.sampling.stage",
               "mvs_pipeline.sampling.points.fps.ops", "mvs_pipeline.sampling.points.three_nn.ops",
               "mvs_pipeline.sampling.points.voxel_pool.ops", "mvs_pipeline.sampling.points.spacing",
               "mvs_pipeline.sampling.streamed", "mvs_pipeline.sampling.points.voxel_pool.streamed",
               "mvs_pipeline.mesh.stage", "mvs_pipeline.mesh.tsdf", "mvs_pipeline.mesh.cuda",
               "mvs_pipeline.backend_start", "mvs_pipeline.depth.warm_up"]   # the warm-up beside the load stage
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            "import mvs_pipeline.cli as c; c.build_parser()\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'numba'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent, check=True)
    assert out.stdout.strip() == "[]", out.stdout
