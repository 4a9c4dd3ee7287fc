"""Optuna sweeps whose errors are one line, and whose refused trials fail alone.

``OptunaChecks``, a Hydra callback (``train.yaml``'s ``hydra.callbacks``), acts on a sweep whose
sweeper is hydra-optuna-sweeper's (``hparams_search=…``, ``hydra/sweeper=optuna``) before the
sweeper is built. Hydra takes a sweeper only from its ``hydra_plugins`` package, so the plugin's
implementation (``OptunaSweeperImpl``) gets its ``setup`` and ``sweep`` wrapped, once:

* **One line, status 2.** ``hydra.sweeper.n_trials`` or ``n_jobs`` below 1 is refused before
  anything runs. A storage that cannot be used (a file that is not a database, a folder, a
  missing folder, an unknown driver, a locked database), a stored study resumed with the other
  direction, or a study where no trial completed, was a 40-91-line traceback and status 1; each
  is now ``foldexp train: error: …`` naming ``hydra.sweeper.storage`` and the study
  (``FOLDEXP_TRACEBACK=1`` shows the traceback instead).
* **A refused trial fails alone.** A trial whose run refuses its config or data (``foldexp
  train``'s one-line error, status 2) raised ``SystemExit``, which no launcher catches: the
  sweep stopped and left the trial RUNNING in the study. The task now raises ``TrialRefused``
  instead: the study marks the trial FAIL and the sweep goes on; refusals are not counted
  against ``hydra.sweeper.max_failure_rate``, so only other errors (a bug) stop it as before.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

from hydra.experimental.callback import Callback

__all__ = ["OptunaChecks", "TrialRefused"]


class TrialRefused(Exception):
    """A trial's run refused its config or data (its one-line error was printed)."""


def _refuse(message: str) -> NoReturn:
    print(f"foldexp train: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def _sweep_errors() -> tuple[type[BaseException], ...]:
    import optuna
    import sqlalchemy.exc

    return (
        ValueError,
        OSError,
        KeyError,
        TrialRefused,
        optuna.exceptions.OptunaError,
        sqlalchemy.exc.SQLAlchemyError,
    )


class OptunaChecks(Callback):
    """Checks an Optuna sweep's counts and wraps the plugin's implementation (module doc)."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        sweeper = config.hydra.sweeper
        if "optuna" not in str(sweeper.get("_target_", "")).lower():
            return
        for key in ("n_trials", "n_jobs"):
            value = sweeper.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                _refuse(f"hydra.sweeper.{key}={value!r}; expected an integer >= 1")
        rate = sweeper.get("max_failure_rate", 0.0)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
            _refuse(f"hydra.sweeper.max_failure_rate={rate!r}; expected 0 <= value <= 1")
        _wrap_implementation()


def _wrap_implementation() -> None:
    from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl

    if getattr(OptunaSweeperImpl, "_foldexp_checked", False):
        return
    setup, sweep = OptunaSweeperImpl.setup, OptunaSweeperImpl.sweep

    def checked_setup(self: Any, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        setup(self, hydra_context=hydra_context, task_function=_refusals_raise(task_function),
              config=config)  # fmt: skip
        launch, allowed = self.launcher.launch, self.max_failure_rate

        def launch_counted(overrides: Any, initial_job_idx: int) -> Any:
            returns = launch(overrides, initial_job_idx=initial_job_idx)
            refused = sum(isinstance(r._return_value, TrialRefused) for r in returns)
            # the sweeper stops when failures / jobs > the rate: refusals are not counted
            self.max_failure_rate = min(1.0, allowed + refused / max(1, len(returns)))
            return returns

        self.launcher.launch = launch_counted

    def checked_sweep(self: Any, arguments: list[str]) -> Any:
        try:
            return sweep(self, arguments)
        except _sweep_errors() as exc:
            if os.environ.get("FOLDEXP_TRACEBACK"):
                raise
            where = f"hydra.sweeper.storage={self.storage}, study_name={self.study_name}"
            if "No trials are completed yet" in str(exc) or "Record does not exist" in str(exc):
                _refuse(f"the Optuna study ({where}) has no completed trial: see the errors above")
            _refuse(f"the Optuna study ({where}): {_first_line(exc)}")

    OptunaSweeperImpl.setup, OptunaSweeperImpl.sweep = checked_setup, checked_sweep
    OptunaSweeperImpl._foldexp_checked = True


def _refusals_raise(task_function: Any) -> Any:
    """``task_function`` raising ``TrialRefused`` where the run refused (status 2)."""

    def task(cfg: Any) -> Any:
        try:
            return task_function(cfg)
        except SystemExit as exc:
            if exc.code != 2:
                raise
            raise TrialRefused("the trial's run was refused (its error is above)") from None

    return task
