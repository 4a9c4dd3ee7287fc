"""Published figures printed beside ours: the Fold paper's Table 1 and the DyNet paper's Table 2.

Fold (Looks et al. 2017, Table 1): inference, trees of 128 leaves, state 1024; CPU = dual 8-core
Xeon (32 hardware threads), GPU = GTX-1080; seconds, wall-clock averages.

DyNet (Neubig et al. 2017, Table 2): CPU training speed, one thread of a Xeon E5-2686 v4, dense
updates; words/s for the RNN LM and the tagger, sentences/s for the Tree-LSTM. Sizes from its
Table 1 are the defaults of ``bench=dynet_tasks``.
"""

from __future__ import annotations

__all__ = [
    "FOLD_TABLE1",
    "FOLD_COLUMNS",
    "FOLD_TRAINING_COST_RATIO",
    "DYNET_TABLE2",
    "DYNET_TOOLKITS",
    "DYNET_TASKS",
]

FOLD_COLUMNS = (
    "manual_batch",
    "manual_tree",
    "dynamic_batch",
    "dynamic_tree",
    "full_batch",
    "full_tree",
    "cost_ratio",
    "speedup_ratio",
)

# device -> batch size -> the eight columns above
FOLD_TABLE1: dict[str, dict[int, tuple[float, ...]]] = {
    "cpu": {
        1024: (14.62, 0.014, 18.68, 0.018, 18.37, 0.017, 1.27, 28.86),
        512: (7.54, 0.014, 9.84, 0.019, 9.57, 0.018, 1.30, 27.68),
        256: (4.14, 0.016, 5.22, 0.020, 5.25, 0.020, 1.26, 25.23),
        128: (2.48, 0.019, 2.95, 0.023, 3.08, 0.024, 1.18, 21.47),
        64: (1.64, 0.025, 1.76, 0.027, 1.78, 0.027, 1.06, 18.55),
        32: (1.27, 0.039, 1.05, 0.032, 1.10, 0.034, 0.82, 14.94),
        1: (0.52, 0.517, 0.26, 0.258, 0.26, 0.262, 0.49, 1.97),
    },
    "gpu": {
        1024: (0.978, 0.0009, 1.590, 0.0015, 1.617, 0.0015, 1.62, 101.79),
        512: (0.530, 0.0010, 0.715, 0.0013, 0.721, 0.0014, 1.34, 114.15),
        256: (0.312, 0.0012, 0.323, 0.0012, 0.340, 0.0013, 1.03, 120.86),
        128: (0.236, 0.0018, 0.164, 0.0012, 0.178, 0.0013, 0.69, 115.05),
        64: (0.193, 0.0030, 0.093, 0.0014, 0.106, 0.0016, 0.48, 96.40),
        32: (0.153, 0.0047, 0.061, 0.0019, 0.074, 0.0023, 0.40, 68.79),
        1: (0.161, 0.1608, 0.038, 0.0376, 0.036, 0.0359, 0.23, 4.47),
    },
}

#: The paper gives no training table; its text (section 2.1) says the cost ratio "rises to 60%
#: for training with backpropagation": the one training figure to compare a training run with.
FOLD_TRAINING_COST_RATIO = 1.6

DYNET_TOOLKITS = ("DyNet C++", "DyNet Python", "Chainer", "DyNet C++ seq", "Theano", "TensorFlow")

# task key -> figures per toolkit above (None: not reported)
DYNET_TABLE2: dict[str, tuple[float | None, ...]] = {
    "rnnlm_mb1": (190, 190, 114, 494, 189, 298),
    "rnnlm_mb4": (830, 825, 295, 1510, 567, 473),
    "rnnlm_mb16": (1820, 1880, 794, 2400, 1100, 606),
    "rnnlm_mb64": (2440, 2470, 1340, 2820, 1260, 636),
    "tagger": (427, 428, 22.7, None, 102, 143),
    "treelstm": (91.6, 88.1, 7.21, None, None, None),
}

# DyNet's Table 1: sizes and the mean sentence length (training words / sentences)
DYNET_TASKS = {
    "rnnlm": {"vocab": 10000, "embed": 128, "hidden": 256, "mean_length": 888e3 / 42.1e3},
    "tagger": {"vocab": 69500, "tags": 9, "embed": 128, "hidden": 50, "mlp": 32,
               "mean_length": 3.50e6 / 142e3},
    "treelstm": {"vocab": 18300, "classes": 5, "embed": 128, "hidden": 128,
                 "mean_length": 164e3 / 8.54e3},
}  # fmt: skip
