"""Train a GPT: `python src/train.py [overrides]`; `-m` runs a sweep. See conf/train.yaml."""

from gptlab.entry_signals import answer_signals

answer_signals()  # first, before the slow imports: Ctrl-C or SIGTERM from here on is one line, never a traceback

from gptlab.signals import FLAG  # noqa: E402

FLAG.install()  # a preemption signal from here on is recorded, and acted on at once until training starts
FLAG.setting_up()

from typing import Optional  # noqa: E402

from omegaconf import DictConfig  # noqa: E402

from gptlab.config.entry import main as gptlab_main  # noqa: E402
from gptlab.launch.cli import user_errors_exit  # noqa: E402
from gptlab.launch.death_watch import watching  # noqa: E402


@gptlab_main(config_name="train")
@user_errors_exit
def main(cfg: DictConfig) -> Optional[float]:
    from gptlab.apps.train import train  # here: a config error, --help and --cfg never import Lightning

    with watching(cfg):  # a main process killed outright (the OOM killer) still says what happened
        return train(cfg)  # the best val/loss, for sweepers


if __name__ == "__main__":
    main()
