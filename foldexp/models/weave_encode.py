"""The weave model's encoder: its network up to the pooled readout, for ``foldexp fingerprint``
(``WeaveModel.encode``) and transfer (``model.init_from``, ``model.freeze=encoder``).

A weave run without molecule features compiles its whole network, read-out MLP included, as one
block graph, whose parameters are saved as ``compiler.layers.<i>`` in ``best.pt``. Splitting it
in two would rename them, and every trained run would stop loading. Instead the readout (the
same blocks, ``weave_network(head=False)``, whose parameters the whole network's are) is
compiled apart on first use, outside the model's modules: no new names, the same weights. With
features (``dataset.features``) the compiled network already ends at the readout and the MLP is
torch's (``head.*``). The encoder's parameters are the compiler's layers that the readout's
blocks hold; for ``model.init_from`` they are copied from a trained weave run of the same depth
(``model.layers``) and shapes (``foldexp.models.transfer``); ``model.freeze=encoder`` leaves
them as they start.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

import foldexp.blocks as fb
from foldexp.executor.compiled import Compiler, collect_ops
from foldexp.models.transfer import check_freeze, freeze, load_encoder

__all__ = ["WeaveEncoder"]

log = logging.getLogger(__name__)
#: What the weave encoder's shapes follow (a refusal's hint).
SHAPES = "model.atom_size, pair_size, graph_size, the atom and pair features"


class WeaveEncoder:
    """The readout of ``model`` (a ``WeaveModel``): ``body`` is its network up to pooling. It
    keeps no reference to the model, which holds it (so it pickles and copies with it)."""

    def __init__(
        self, model: torch.nn.Module, body: fb.Block, init_from: str | None, freeze_: str
    ) -> None:
        self.body = body
        self.init_from = init_from  # read by start_from (a fresh or resumed run only)
        self._compiled: Compiler | None = None
        own = {id(op.module) for op in collect_ops(body) if op.module is not None}
        layers = [(i, m) for i, m in enumerate(model.compiler.layers) if id(m) in own]
        #: ``compiler.layers.<i>`` of the readout's blocks that hold weights (state_dict's)
        self.prefixes = tuple(f"compiler.layers.{i}" for i, m in layers if len(m.state_dict()))
        if check_freeze(freeze_, init_from) == "encoder":
            freeze(model, self.prefixes)

    def readout(self, inputs: Sequence[Any] | None) -> torch.Tensor:
        """``(M, graph_size)``: the pooled readout of ``inputs`` (a batch's molecules)."""
        if inputs is None:
            raise ValueError(
                "WeaveModel.encode needs the batch's molecules: collate the batch in this process "
                "(one that came from a DataLoader worker carries none)"
            )
        if self._compiled is None:  # traces are not kept: a fingerprint streams its inputs
            self._compiled = Compiler(self.body)
        return self._compiled(list(inputs))

    def start_from(self, model: torch.nn.Module, setup: Any) -> None:
        """``model.init_from``: copies a trained weave run's readout weights into ``model``
        (its ``prepare_training`` hook); nothing without ``init_from``."""
        if not self.init_from:
            return
        where = f"model.init_from={self.init_from}"
        source = setup.trained_model(self.init_from)
        depth = getattr(source, "weave_layers", None)
        if type(source) is type(model) and depth != model.weave_layers:
            raise ValueError(
                f"{where}: that run's weave has model.layers={depth}, this one "
                f"{model.weave_layers}; an encoder starts a network of the same depth"
            )
        copied = load_encoder(model, source, self.prefixes, where, SHAPES)
        log.info("%s: the encoder's %d weights start from that run", where, copied)
