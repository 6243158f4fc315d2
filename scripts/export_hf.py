"""Export a training checkpoint as a Hugging Face model directory (conf/export_hf.yaml).

    python scripts/export_hf.py ckpt_path=outputs/runs/<name>/<date>/<time>/checkpoints/last.ckpt out=exported/

Writes config.json, model.safetensors and the tokenizer files (tokenizer.json, tokenizer_config.json) of the
run's tokenizer, so AutoModelForCausalLM and AutoTokenizer both load the directory: all of them or, when the export
fails (a full disk), none. A directory that already holds files is refused (overwrite=true writes into it), and so
is one inside a run's checkpoints/.
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from gptlab.atomic import STAGING_DIR, remove, write_together
from gptlab.checkpoint.reader import (
    check_tokenizer_fits,
    check_tokenizer_matches,
    load_model,
    recorded_tokenizer,
    resolve_checkpoint,
)
from gptlab.config.entry import main as gptlab_main
from gptlab.config.ranges import boolean, writable_dir
from gptlab.errors import ConfigError
from gptlab.interop import save_pretrained
from gptlab.interop.hf_export import export_tokenizer
from gptlab.launch.cli import user_errors_exit
from gptlab.recorded import build_recorded
from gptlab.runs.write_targets import check_new_dir

WRITES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@gptlab_main(config_name="export_hf")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    writable_dir("out", cfg.out)  # before the checkpoint is read: a file or a read-only dir fails at once
    boolean("overwrite", cfg.overwrite)
    remove(Path(cfg.out) / STAGING_DIR)  # what an export killed midway left: gptlab's own
    check_new_dir("out", Path(cfg.out), cfg.overwrite, "overwrite=true", WRITES)
    ckpt = resolve_checkpoint(cfg.ckpt_path)  # a run dir: its newest checkpoint that loads
    model, hparams = load_model(ckpt)
    if cfg.get("tokenizer") is not None:  # the user's own config: only the one the model was trained with
        tokenizer_cfg = OmegaConf.to_container(cfg.tokenizer, resolve=True)
        check_tokenizer_matches(recorded_tokenizer(hparams), tokenizer_cfg, "leave tokenizer out: export_hf.py "
                                "then exports the one the model was trained with")
        tokenizer = hydra.utils.instantiate(tokenizer_cfg)
        check_tokenizer_fits(tokenizer, model, "tokenizer=<the one it was trained with>")
    else:  # the checkpoint's: a trusted class only (gptlab.recorded)
        tokenizer_cfg = recorded_tokenizer(hparams)
        if tokenizer_cfg is None:
            raise ConfigError(f"ckpt_path={cfg.ckpt_path!r} does not record its tokenizer; add "
                              "tokenizer=<the training run's: bytes, gpt2, r50k_base or cl100k_base>.")
        tokenizer = build_recorded(tokenizer_cfg, "tokenizer", str(ckpt))

    def write(staging: Path) -> None:
        save_pretrained(model, staging)
        export_tokenizer(tokenizer, staging, tokenizer_cfg)

    try:
        write_together(Path(cfg.out), write)  # all the files or none: a full disk leaves out= as it was
    except OSError as err:  # a dir that cannot be created or written (permissions, a special filesystem)
        raise ConfigError(f"out={cfg.out!r} cannot be written ({err.strerror or err}); choose a directory you can "
                          "write to.") from err
    print(f"wrote {cfg.out} ({model.num_parameters():,} parameters, {model.config.norm}-LN, tokenizer "
          f"{tokenizer.name}, end-of-text id {tokenizer.eot_id})")


if __name__ == "__main__":
    main()
