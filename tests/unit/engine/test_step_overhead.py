"""What one engine training step asks of a device (``foldexp.bench.overhead``): no host sync
between the plan's upload and the loss, the plan uploaded in one copy (constants in one
more), few ops on the per-group route, counted on the CPU and, for uploads, with the model on
the ``meta`` device."""

from __future__ import annotations

import torch

from foldexp.bench.overhead import count_ops, cuda_route, peers_step
from foldexp.executor import compiling


def test_the_counter_tells_views_syncs_and_uploads_apart() -> None:
    x = torch.ones(3)

    def fn() -> None:
        y = x.view(3) * 2
        y.sum().item()
        y.to("meta")

    c = count_ops(fn)
    assert c.views == 1 and c.syncs == 1 and c.uploads == 1
    assert c.ops["mul.Tensor"] == 1 and c.total == c.views + c.not_views


def test_an_engine_step_makes_no_host_sync() -> None:
    with cuda_route():
        step = peers_step("engine", trees=16, leaves=8, hidden=8)
        step()
        c = count_ops(step)
    assert c.syncs == 0 and c.not_views > 50


def test_an_engine_step_uploads_its_plan_in_one_copy() -> None:
    with cuda_route():
        step = peers_step("engine", trees=16, leaves=8, hidden=8, device="meta")
        step()
        c = count_ops(step)
    # one for the plan's index arrays, one for the constants (the trees' word ids)
    assert c.uploads <= 2, c.uploads


def test_an_engine_step_of_the_peers_workload_dispatches_few_ops() -> None:
    # The peers' workload (256 trees of 64 leaves) on the per-group route (``device.compile=off``)
    # of a CUDA run, torch's ops for the Tree-LSTM updates; the count does not depend on the
    # width. 747 ops that are not views at first; 660 once a group's outputs went into the
    # buffers in one ``_foreach_copy_``, sinks ran last (the classifier: 1 call, not 9) and
    # weight gradients were multiplied once a step. The count is exact: the bound is that and 1 %.
    with cuda_route(), compiling("off"):
        step = peers_step("engine", hidden=8)
        step()
        c = count_ops(step)
    assert c.not_views <= 666, (c.not_views, c.top(12))
    # h and c go into their rows in one _foreach_copy_ per group (47 copy_ before; 2 remain:
    # the constants, the classifier's output)
    assert c.ops["copy_"] <= 2 and c.ops["_foreach_copy_"] <= 18, c.top(24)


def test_outputs_go_into_their_rows_with_one_copy_or_row_by_row() -> None:
    from foldexp.executor.calls import write_outputs

    bufs = [torch.zeros(6, 2), torch.zeros(3, dtype=torch.int64)]
    h, c = torch.ones(2, 2), torch.full((2, 2), 2.0)
    c_ops = count_ops(lambda: write_outputs(bufs, [(0, 1, 3), (0, 3, 5)], [h, c]))
    assert c_ops.ops["_foreach_copy_"] == 1 and c_ops.ops["copy_"] == 0
    assert bufs[0][1:3].eq(1).all() and bufs[0][3:5].eq(2).all()
    assert bufs[0][0].eq(0).all() and bufs[0][5].eq(0).all()
    # a (1, 2) row broadcast, a float64 block and a Python number take the row-by-row path
    write_outputs(bufs, [(0, 0, 1), (0, 5, 6), (1, 0, 3)], [torch.full((1, 2), 3.0),
                  torch.full((1, 2), 4.0, dtype=torch.float64), 7])  # fmt: skip
    assert bufs[0][0].eq(3).all() and bufs[0][5].eq(4).all() and bufs[1].eq(7).all()
    write_outputs(bufs, [(0, 1, 3)], [torch.full((2,), 5.0)])  # broadcast over two rows
    assert bufs[0][1:3].eq(5).all()
