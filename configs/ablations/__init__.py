"""One config file per ablation table: get_config(arg) + get_sweep()."""
