"""``run_bench`` end to end at toy sizes: the CSV, the markdown and the plots, and redrawing the
plots from the CSV alone. Nothing here asserts a time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from foldexp.bench.app import compose_config
from foldexp.bench.peer_process import PeerProcess, child_env
from foldexp.bench.plots import redraw
from foldexp.bench.results import CSV_NAME, FIELDS, to_frame
from foldexp.bench.run import run_bench
from foldexp.bench.timing import setup_env
from foldexp.config.errors import ConfigError


@pytest.fixture(scope="module")
def toy_run(
    tmp_path_factory: pytest.TempPathFactory, toy_bench: list[str]
) -> tuple[Path, pd.DataFrame]:
    out = tmp_path_factory.mktemp("bench")
    cfg = compose_config([*toy_bench, "bench.experiments=[table1,scaling]"], output_dir=out)
    return out, run_bench(cfg)


def test_csv_is_tidy_one_row_per_measurement(toy_run: tuple[Path, pd.DataFrame]) -> None:
    out, df = toy_run
    csv = pd.read_csv(out / CSV_NAME)
    assert list(csv.columns[: len(FIELDS)]) == list(FIELDS)
    assert len(csv) == len(df) and (csv["seconds"] > 0).all()
    t1 = csv[csv["experiment"] == "table1"]
    cols = {"manual", "dynamic", "full_dynamic", "schedule_dynamic", "schedule_full_dynamic"}
    cols |= {"schedule_cached_full_dynamic"}  # the same batch with per-input traces kept
    assert set(t1["column"]) == cols | {"manual_node"}
    assert set(t1.loc[t1["column"] == "manual_node", "batch_size"]) == {1}  # the paper's baseline
    assert set(t1["mode"]) == {"inference", "training"}
    # every (mode, batch, column) has both repeats
    assert (t1.groupby(["mode", "batch_size", "column"]).size() == 2).all()
    assert set(csv["device"]) == {"cpu"} and set(csv["threads"]) == {1}
    assert set(csv["preset"]) == {"quick"} and csv["torch"].notna().all()
    sc = csv[csv["experiment"] == "scaling"]
    assert set(sc["shape"]) == {"balanced", "random", "chain"} and set(sc["size"]) == {4, 8}
    chain8 = sc[(sc["shape"] == "chain") & (sc["size"] == 8)]
    assert (chain8["calls"] == chain8["depth"]).all() and (chain8["depth"] == 8).all()


def test_markdown_has_the_papers_layout(toy_run: tuple[Path, pd.DataFrame]) -> None:
    md = (toy_run[0] / "bench.md").read_text()
    assert "### Table 1, inference" in md and "### Table 1, training" in md
    assert "| batch size | manual batch | manual tree | dynamic batch |" in md
    assert "28.9" in md  # the paper's CPU speedup at batch 1024, beside ours
    assert "### Scaling, inference" in md
    assert "cost ratio" in md.split("\n\n")[2]  # the summary paragraph


def test_plots_exist_and_redraw_from_the_csv_alone(
    toy_run: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    out = toy_run[0]
    for name in ("table1_inference_per_tree", "table1_inference_ratios",
                 "table1_training_per_tree", "scaling_inference"):  # fmt: skip
        assert (out / f"{name}.png").stat().st_size > 0
    (tmp_path / CSV_NAME).write_bytes((out / CSV_NAME).read_bytes())
    drawn = redraw(tmp_path)
    assert {p.name for p in drawn} >= {"table1_inference_per_tree.png", "scaling_inference.png"}
    assert all(p.parent == tmp_path and p.stat().st_size > 0 for p in drawn)


def test_redraw_throughput_plots_from_a_handmade_csv(tmp_path: Path) -> None:
    rows = [
        {"experiment": "peers", "mode": "training", "column": c, "repeat": r, "seconds": s,
         "items": 8, "batch_size": 8, "unit": "trees"}
        for c, s in (("engine", 0.1), ("level", 0.2)) for r in range(2)
    ] + [{"experiment": "dynet_tasks", "mode": "training", "column": "treelstm", "repeat": 0,
          "seconds": 1.0, "items": 4, "batch_size": 1, "unit": "sentences"}]  # fmt: skip
    to_frame(rows, {"device": "cpu"}).to_csv(tmp_path / CSV_NAME, index=False)
    assert {p.name for p in redraw(tmp_path)} == {"peers.png", "dynet_tasks.png"}


# the peers' workload shrunk to a few seconds
TINY_PEERS = [
    "bench.peers.trees=4",
    "bench.peers.leaves=4",
    "bench.peers.hidden=4",
    "bench.peers.embed=4",
    "bench.peers.repeats=2",
    "bench.peers.timeout_s=120",
]


def test_peers_and_dynet_tasks_run_side_by_side(tmp_path: Path, toy_bench: list[str]) -> None:
    overrides = [
        *toy_bench,
        "bench.experiments=[peers,dynet_tasks]",
        "bench.peers.implementations=[engine,level]",
        *TINY_PEERS,
        "bench.dynet_tasks.tasks=[treelstm]",
        "bench.dynet_tasks.sentences=2",
        "bench.dynet_tasks.treelstm_batch_sizes=[2]",
        "bench.plots=false",
    ]
    df = run_bench(compose_config(overrides, output_dir=tmp_path))
    peers = df[df["experiment"] == "peers"]
    assert set(peers["column"]) == {"engine", "level"} and (peers["seconds"] > 0).all()
    # same trees, same initial weights: the same loss whichever way it is batched
    assert peers.groupby("column")["loss"].first().nunique() == 1
    assert json.loads((tmp_path / "peers_trees.json").read_text())["labels"]
    md = (tmp_path / "bench.md").read_text()
    assert "### Peers" in md and "### DyNet paper tasks" in md and "91.6" in md


def test_the_peers_run_on_the_tape_when_asked(tmp_path: Path, toy_bench: list[str]) -> None:
    """``device.compile`` reaches the peers' worker processes: foldexp's cells and a user's on
    the tape, the same loss as level-by-level batching."""
    overrides = [
        *toy_bench,
        "bench.experiments=[peers]",
        "bench.peers.implementations=[engine,engine_plain,level]",
        *TINY_PEERS,
        "bench.plots=false",
        "device.compile=graphs",
    ]
    df = run_bench(compose_config(overrides, output_dir=tmp_path))
    losses = df.groupby("column")["loss"].first()
    assert set(losses.index) == {"engine", "engine_plain", "level"}
    assert losses.max() - losses.min() < 1e-5 * abs(losses.mean())
    notes = df.groupby("column")["note"].first()
    assert all("device.compile=graphs" in notes[c] for c in ("engine", "engine_plain"))


def test_a_broken_peer_is_reported_not_raised(tmp_path: Path) -> None:
    trees = tmp_path / "t.json"
    trees.write_text(json.dumps({"trees": [[[1], [2]]], "labels": [0]}))
    params = {"trees_file": str(trees), "vocab": 3, "embed": 2, "hidden": 2, "classes": 2}
    peer = PeerProcess("no_such_peer", params, sys.executable, child_env(1), tmp_path / "log", 120)
    reply = peer.read()
    peer.close()
    assert (
        reply is not None and reply["status"] == "unavailable" and "no_such_peer" in reply["reason"]
    )


@pytest.mark.parametrize("preset", ["quick", "paper", "scaling", "peers", "dynet_tasks"])
def test_every_preset_composes(preset: str, tmp_path: Path) -> None:
    cfg = compose_config([f"bench={preset}"], output_dir=tmp_path)
    assert cfg.bench.name == preset and cfg.bench.experiments


def test_config_mistakes_fail_at_compose_time(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no_such_key"):
        compose_config(["bench.no_such_key=1"], output_dir=tmp_path)
    with pytest.raises(Exception, match="experiments"):
        compose_config(["bench.experiments=[table2]"], output_dir=tmp_path)


@pytest.mark.parametrize(
    "override, expected",
    [
        ("bench.peers.implementations=[loop_plan]", "'loop_plan' is not a peer; one of engine"),
        ("bench.peers.loop_trees=-3", "bench.peers.loop_trees=-3; expected 0 <= value <= 65536"),
        (
            "bench.peers.steps_per_turn=0",
            "bench.peers.steps_per_turn=0; expected 1 <= value <= 10000",
        ),
        ("bench.budget_s=nan", "bench.budget_s=nan; expected a finite value > 0"),
        ("bench.batch_sizes=[256,0]", "bench.batch_sizes=[256, 0]; expected 1 <= value <= 65536"),
        ("bench.scaling.batch_size=0", "bench.scaling.batch_size=0; expected 1 <= value <= 65536"),
        ("bench.dynet_tasks.threads=0", "bench.dynet_tasks.threads=0; expected 1 <= value <= 1024"),
    ],
)
def test_values_out_of_range_fail_before_anything_is_timed(
    override: str, expected: str, tmp_path: Path
) -> None:
    cfg = compose_config(["bench=peers", override], output_dir=tmp_path / "run")
    with pytest.raises(ConfigError) as err:
        run_bench(cfg)
    assert expected in str(err.value)
    assert not (tmp_path / "run").exists()  # nothing written, nothing timed


def test_cuda_without_a_gpu_fails_clearly() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="device=cuda"):
        setup_env("cuda", 1)
