"""Sample from a trained model: `python src/sample.py ckpt_path=<ckpt or HF dir> prompt="..."`. See conf/sample.yaml."""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from omegaconf import DictConfig

from gptlab.config.entry import main as gptlab_main
from gptlab.launch.cli import user_errors_exit


@gptlab_main(config_name="sample")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    from gptlab.eval.sampling import sample  # here: a config error and --cfg never import the model's code

    for i, text in enumerate(sample(cfg)):
        if i:
            print("\n" + "-" * 40)
        print(text)


if __name__ == "__main__":
    main()
