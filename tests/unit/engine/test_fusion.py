"""Op fusion: runs of op blocks in a pipe become one op — same values and gradients as the
blocks one by one (the eager oracle), fewer invocations and calls."""

from __future__ import annotations

import torch
from torch import nn

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.blocks._fusion import FusedOps, fused_blocks
from foldexp.testing import assert_compilers_agree, check_block


class _Split(nn.Module):
    """Vector → a pair of vectors (a tuple output inside a fused run)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(self.a(x)), self.b(x)


class _Join(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.out(torch.cat([x, y], dim=1))


def _chain() -> fb.Block:
    return fb.Vector(3) >> fb.Function(_Split()) >> fb.Function(_Join()) >> fb.FC(5)


def test_a_run_with_tuple_values_inside_matches_eager_values_and_gradients() -> None:
    inputs = [[0.1 * k, -0.2, 0.3 * k] for k in range(7)]
    compiler = check_block(_chain(), inputs)
    fused = [op.name for op in compiler.ops if " >> " in op.name]
    assert fused == ["_Split >> _Join >> FC"]
    assert compiler.last_stats["calls"] == 1 and compiler.last_stats["nodes"] == 7


def test_fused_and_unfused_compilers_agree_and_reach_every_parameter() -> None:
    block = _chain()
    inputs = [[0.5, -1.0, 2.0], [0.0, 1.0, 0.5]]
    fused, plain = Compiler(block), Compiler(block, fuse_ops=False)
    assert_compilers_agree(fused, plain, inputs)
    assert (fused.last_stats["calls"], plain.last_stats["calls"]) == (1, 3)
    grads = torch.autograd.grad(fused(inputs).square().sum(), list(fused.parameters()))
    assert len(grads) == 8 and all(g.abs().sum() > 0 for g in grads)


def test_only_plain_op_blocks_fuse() -> None:
    # Concat traces its own way; GetItem and Identity are not ops: each ends a run.
    pipe = fb.Pipe(
        fb.Vector(2),
        fb.FC(2),
        fb.FC(2),
        fb.AllOf(fb.Identity(), fb.Identity()),
        fb.Concat(),
        fb.FC(3),
        fb.Identity(),
        fb.FC(1),
    )
    Compiler(pipe)
    blocks = fused_blocks(pipe)
    assert [type(b) for b in blocks] == [
        fb.Vector,
        FusedOps,
        fb.AllOf,
        fb.Concat,
        type(pipe.blocks[5]),
        fb.Identity,
        type(pipe.blocks[7]),
    ]
    assert blocks[1].parts == pipe.blocks[1:3]


def test_runs_fuse_inside_a_map_and_unfused_inside_a_reduce() -> None:
    # Map has a tracing closure, so its item pipe fuses; Reduce traces through ``_trace``, which
    # invokes the unfused ops — both must compile and match eager.
    item = fb.Vector(3) >> fb.FC(4) >> fb.FC(2)
    compiler = check_block(fb.Map(item) >> fb.Sum(), [[[1.0, 2.0, 3.0]] * n for n in (1, 2, 3)])
    assert any(" >> " in op.name for op in compiler.ops)
    pair = fb.Concat() >> fb.FC(2) >> fb.FC(2)
    check_block(fb.Map(fb.Vector(2)) >> fb.Reduce(pair), [[[1.0, 2.0]] * n for n in (1, 2, 5)])


def test_fusion_crosses_no_recursion() -> None:
    # A run ends at a ForwardDeclaration use; the pipes inside the recursion fuse on their own.
    decl = fb.ForwardDeclaration(name="e")
    leaf = fb.Scalar() >> fb.Function(lambda x: x.unsqueeze(1)) >> fb.FC(3)
    node = fb.Record((decl(), decl())) >> fb.Concat() >> fb.FC(3)
    decl.resolve_to(fb.OneOf(lambda x: isinstance(x, tuple), {False: leaf, True: node}))
    check_block(decl() >> fb.FC(2), [1.0, (1.0, 2.0), ((0.5, 1.0), -1.0)])
