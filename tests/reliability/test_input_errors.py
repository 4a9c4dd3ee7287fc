"""Bad Python inputs raise ``InputError`` naming the input and the path inside it, never a bare
torch or numpy error: ids outside an embedding table, integers outside their dtype, and
batches that are not lists.

The compiled path checks ids and integer ranges batch-wide while scheduling (one numpy min/max),
then traces the batch again through the blocks' own checks to name the offender; the eager
oracle checks them as it goes.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import foldexp.blocks as fb
from foldexp import Compiler
from foldexp.models.tree_lstm import binary_tree_lstm

VOCAB = 1000


def _words_model(**kwargs: Any) -> Compiler:
    """A record of a label and a sentence of word ids, embedded and summed."""
    words = fb.Map(fb.Scalar("int64") >> fb.Function(fb.Embedding(VOCAB, 8))) >> fb.Sum()
    return Compiler(fb.Record({"label": fb.Scalar("int64"), "text": words}), **kwargs)


def _batch(bad_word: int | None = None, label: int = 1) -> list[dict[str, Any]]:
    third = [4, 5, 6, 7, 8, 9]
    if bad_word is not None:
        third[5] = bad_word
    return [
        {"label": 0, "text": [1, 2, 3]},
        {"label": 1, "text": [VOCAB - 1, 0]},
        {"label": 2, "text": [1, 1]},
        {"label": label, "text": third},
    ]


@pytest.mark.parametrize("options", [{}, {"fuse_ops": False, "merge_duplicates": False}])
@pytest.mark.parametrize("bad", [5000, VOCAB, -1])
def test_an_id_outside_the_embedding_table_names_its_path(bad: int, options: Any) -> None:
    model = _words_model(**options)
    model(_batch())  # ids 0 and VOCAB - 1 are fine, and so is a label outside the table
    model(_batch(label=5000))
    with pytest.raises(
        fb.InputError,
        match=rf"at input\[3\]\['text'\]\[5\] in Function\(Embedding\): id {bad} is outside "
        rf"Embedding\({VOCAB}, 8\): expected 0 <= id < {VOCAB}",
    ):
        model(_batch(bad))


def test_an_id_outside_the_table_fails_with_cached_traces_and_in_eager_evaluation() -> None:
    model = _words_model(cache_traces=True)
    model(_batch())
    with pytest.raises(fb.InputError, match=r"at input\[3\]\['text'\]\[5\] in Function"):
        model.build(_batch(-3))
    with pytest.raises(fb.InputError, match=r"at input\['text'\]\[5\] in Function.*id -3 is"):
        model.root.eval(_batch(-3)[3])


def test_an_id_outside_the_table_in_a_deep_tree_names_the_tree() -> None:
    tree: tuple = (3,)
    for i in range(300):
        tree = (tree, (i % 50,))
    bad = ((1,), (7000,))
    model = Compiler(binary_tree_lstm(50, 4, 4) >> fb.GetItem(0))
    with pytest.raises(fb.InputError, match=r"at input\[1\] in Function\(Embedding\): id 7000 is"):
        model([tree, bad])
    with pytest.raises(fb.InputError, match=r"id 7000 is outside Embedding\(50, 4\)"):
        model.root.eval(bad)


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("big", [2**70, 2**63, -(2**63) - 1])
def test_an_integer_too_large_for_int64_names_its_path(big: int, merge: bool) -> None:
    model = _words_model(merge_duplicates=merge)
    batch = _batch()
    batch[2]["label"] = big
    with pytest.raises(
        fb.InputError,
        match=rf"at input\[2\]\['label'\] in Scalar\('int64'\): expected an integer in int64's "
        rf"range \[-9223372036854775808, 9223372036854775807\], got {big}",
    ):
        model(batch)
    with pytest.raises(fb.InputError, match=rf"at input\['label'\] in Scalar.*got {big}"):
        model.root.eval(batch[2])
    batch[2]["label"] = 2**63 - 1  # the largest int64 is fine
    model(batch)


def test_integers_outside_smaller_integer_dtypes_are_input_errors_not_wrapped() -> None:
    # torch would wrap -1 to 255 silently in a uint8 tensor
    with pytest.raises(fb.InputError, match=r"at input\[1\] in Scalar\('uint8'\).*got -1"):
        Compiler(fb.Scalar("uint8"))([3, -1])
    with pytest.raises(fb.InputError, match=r"at input\[2\] in Scalar\('int32'\).*got 4294967296"):
        Compiler(fb.Scalar("int32"))([1, 1, 2**32])
    assert Compiler(fb.Scalar("uint8"))([0, 255]).tolist() == [0, 255]


@pytest.mark.parametrize(
    ("make", "shown"),
    [
        (lambda: None, r"NoneType None$"),
        (lambda: (x for x in [1.0, 2.0]), r"generator .*; make it one with list\(\.\.\.\)"),
    ],
)
def test_a_batch_that_is_not_a_list_is_an_input_error(make: Any, shown: str) -> None:
    model = Compiler(fb.Scalar())
    for call in (model, model.build):
        with pytest.raises(
            fb.InputError, match=r"expected a batch: a list of inputs, got " + shown
        ):
            call(make())
    assert torch.equal(model((1.0, 2.0)), torch.tensor([1.0, 2.0]))  # a tuple is a batch too
