"""``bench=peers`` survives its peers: chatter, crashes, garbage, hangs and missing libraries.

Every peer here is a fake -- a small module registered through ``PEERS`` / ``PEER_MODULES`` and
loaded by the worker from its file -- so nothing needs DGL or DyNet, and no peer imports torch.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
from pathlib import Path

import pytest

from foldexp.bench import peers
from foldexp.bench.app import compose_config
from foldexp.bench.peer_process import PeerProcess, child_env
from foldexp.bench.run import run_bench

_STEP = """
def setup(name, params, trees, labels):
    def step():
        {body}
        return {{"loss": 1.0}}
    return step, {{"version": "fake 0.0"}}
"""

# name -> (module source, a fragment of the row's note; "" for a peer that measures fine)
FAKES = {
    # DGL's first import prints "DGL backend not selected ..." to stdout: the original crash
    "chatty": (
        "print('Setting the default backend to \"pytorch\".')\n"
        + _STEP.format(body="print('{not json either')"),
        "",
    ),
    "crashes_on_import": ("import sys\nprint('loading...')\nsys.exit(3)\n", "exited with code 3"),
    "dies_in_step": ("import os\n" + _STEP.format(body="os._exit(7)"), "exited with code 7"),
    "garbage": (
        "import os, sys\nFD = int(sys.argv[sys.argv.index('--reply-fd') + 1])\n"
        + _STEP.format(body="os.write(FD, b'<html>oops</html>\\n')"),
        "malformed reply '<html>oops</html>'",
    ),
    "bad_seconds": (
        _STEP.replace('return {{"loss": 1.0}}', 'return {{"seconds": "fast"}}').format(body="pass"),
        "malformed step reply '\"fast\"'",
    ),
    "raises_in_step": (_STEP.format(body="raise RuntimeError('out of memory')"), "out of memory"),
    "not_installed": (
        "class Unavailable(Exception):\n    pass\n\n"
        "def setup(name, params, trees, labels):\n"
        "    raise Unavailable('fakelib is not installed; pip install fakelib')\n",
        "skipped: fakelib is not installed",
    ),
}


@pytest.fixture
def fake_peers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Registers every fake in ``FAKES``; returns the folder holding their modules."""
    folder = tmp_path / "fakes"
    folder.mkdir()
    for name, (source, _) in FAKES.items():
        path = folder / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        monkeypatch.setitem(peers.PEERS, name, f"fake peer {name}")
        monkeypatch.setitem(peers.PEER_MODULES, name, path)
    return folder


def _trees_file(tmp_path: Path) -> Path:
    path = tmp_path / "trees.json"
    path.write_text(json.dumps({"trees": [[[1], [2]], [[0], [[1], [2]]]], "labels": [0, 1]}))
    return path


def test_every_misbehaving_peer_becomes_a_row_naming_its_reason(
    tmp_path: Path, fake_peers: Path
) -> None:
    out = tmp_path / "run"
    cfg = compose_config(
        [
            "bench=peers",
            f"bench.peers.implementations=[{','.join(FAKES)}]",
            "bench.peers.trees=2",
            "bench.peers.leaves=3",
            "bench.peers.warmup=1",
            "bench.peers.repeats=2",
            "bench.peers.steps_per_turn=2",
            "bench.peers.timeout_s=60",
            "bench.progress=false",
            "bench.plots=false",
            "device.keep_memory=false",
        ],
        output_dir=out,
    )
    df = run_bench(cfg)  # before: JSONDecodeError on the chatty peer's first line
    rows = df[df["experiment"] == "peers"]
    chatty = rows[rows["column"] == "chatty"]
    assert len(chatty) == 4 and (chatty["seconds"] > 0).all()  # 2 rounds x 2 steps, all timed
    for name, (_, reason) in FAKES.items():
        if not reason:
            continue
        mine = rows[rows["column"] == name]
        assert len(mine) == 1, (name, mine)
        note = str(mine["note"].iloc[0])
        assert reason in note and math.isnan(mine["seconds"].iloc[0]), (name, note)
    log = (out / "peers" / "chatty.log").read_text()
    assert "default backend" in log and "{not json either" in log  # the chatter kept, aside
    md = (out / "bench.md").read_text()
    assert "fakelib is not installed" in md and "exited with code 3" in md


def _started(name: str, tmp_path: Path, fake_peers: Path, timeout: float) -> PeerProcess:
    params = {"trees_file": str(_trees_file(tmp_path)), "module": str(fake_peers / f"{name}.py")}
    return PeerProcess(
        name, params, sys.executable, child_env(1), tmp_path / f"{name}.log", timeout
    )


def test_a_silent_peer_is_killed_after_its_timeout(tmp_path: Path, fake_peers: Path) -> None:
    (fake_peers / "hangs.py").write_text(_STEP.format(body="__import__('time').sleep(60)"))
    peer = _started("hangs", tmp_path, fake_peers, timeout=60)
    try:
        assert (peer.read() or {}).get("status") == "ready"
        peer.timeout = 0.5  # the step, unlike the start, is quick for every real peer here
        assert peer.send("step") and peer.read() is None
        assert peer.note.startswith("failed: no reply within 0.5 s (killed)")
        assert peer.proc.wait(timeout=10) != 0
    finally:
        peer.close()


def test_replies_come_on_their_own_channel_not_stdout(tmp_path: Path, fake_peers: Path) -> None:
    peer = _started("chatty", tmp_path, fake_peers, timeout=60)
    try:
        ready = peer.read()
        assert ready is not None and ready["status"] == "ready" and ready["version"] == "fake 0.0"
        assert peer.send("step 3")
        reply = peer.read()
        assert reply is not None and len(reply["seconds"]) == 3 and reply["loss"] == 1.0
    finally:
        peer.close()
    assert peer.proc.returncode == 0


def test_an_unreadable_trees_file_is_a_failure_naming_it(tmp_path: Path, fake_peers: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"trees": [[1], [2]],\n "labels": [0,]}')
    params = {"trees_file": str(broken), "module": str(fake_peers / "chatty.py")}
    peer = PeerProcess("chatty", params, sys.executable, child_env(1), tmp_path / "b.log", 60)
    try:
        reply = peer.read()
    finally:
        peer.close()
    assert reply is not None and reply["status"] == "failed"
    assert f"{broken}:2:" in reply["reason"] and "expected valid JSON" in reply["reason"]


def test_a_peer_that_cannot_start_is_a_row(tmp_path: Path, fake_peers: Path) -> None:
    cfg = compose_config(
        [
            "bench=peers",
            "bench.peers.implementations=[chatty]",
            "bench.peers.trees=2",
            "bench.peers.leaves=3",
            f"bench.peers.python={tmp_path / 'no-such-python'}",
            "bench.progress=false",
        ],
        output_dir=tmp_path,
    )
    env = type("Env", (), {"threads": 1})()
    cells = peers.peer_cells(cfg.bench, env, 0, tmp_path)  # type: ignore[arg-type]
    records = [r for cell in cells for r in cell.run()]
    assert [r["column"] for r in records] == ["chatty"]
    assert (
        records[0]["note"].startswith("failed: cannot start")
        and "no-such-python" in (records[0]["note"])
    )
