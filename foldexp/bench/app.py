"""``foldexp bench``: the Hydra app, a thin shell over ``run_bench``.

``compose_config`` builds the same config without Hydra's app machinery, for tests and notebooks
(``output_dir`` stands in for Hydra's run folder).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig, open_dict

from foldexp.bench.schema import register_bench_configs
from foldexp.config import CONF_DIR
from foldexp.config.hydra_errors import check_command_line, composition_done
from foldexp.config.overrides import check_bool_overrides

__all__ = ["main", "compose_config"]

register_bench_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="bench")
def main(cfg: DictConfig) -> None:
    """Runs the configured benchmarks into the Hydra run folder (removed if refused)."""
    from foldexp.train.refused import no_folder_if_refused

    with no_folder_if_refused(Path(cfg.paths.output_dir)):
        _main(cfg)


def _main(cfg: DictConfig) -> None:
    check_command_line(cfg)  # what OmegaConf lets through (a boolean key given 2)
    composition_done()  # from here, errors are the run's (foldexp/config/hydra_errors.py)
    from foldexp.bench.run import run_bench
    from foldexp.train.app import report_errors

    report_errors("bench", lambda: run_bench(cfg))  # a wrong value: one line, exit status 2


def compose_config(
    overrides: list[str] | None = None, output_dir: str | Path | None = None
) -> DictConfig:
    """Composes the bench config from ``foldexp/conf`` with overrides, as the command line would."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(
            config_name="bench", overrides=list(overrides or []), return_hydra_config=True
        )
    HydraConfig.instance().set_config(cfg)
    check_bool_overrides(cfg, list(overrides or []))
    with open_dict(cfg):
        if output_dir is not None:
            cfg.paths.output_dir = str(output_dir)
        del cfg["hydra"]
    return cfg
