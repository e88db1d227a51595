#!/usr/bin/env python3
"""Rebuilds verlpp's default config tree from verl's generated trainer config.

Usage: scripts/import_verl_config.py VERL_GENERATED_PPO_TRAINER_YAML VERL_COMMIT

Reads verl's verl/trainer/config/_generated_ppo_trainer.yaml (the flattened ppo_trainer
config) and rewrites
  - the JSON text in src/core/controller/config_defaults.cpp: verl's keys and default values,
    with verl's OmegaConf interpolations turned into the `${a.b}` references verlpp resolves,
    and verlpp's own keys and deliberate differences (OVERLAY below) laid over them;
  - tests/controller/verl_ppo_trainer_keys.txt: every leaf key of verl's file (the test that
    checks verlpp knows each of them), headed by the verl commit.
Needs PyYAML. Run from the repository root.
"""
import json
import re
import sys

import yaml

# Leaf names verl's config dataclasses declare as float; YAML writes some of their defaults as
# integers (`top_p: 1`), and verlpp keeps a default's type, so they become floats here.
FLOAT_LEAVES = {
    "clip_cov_lb", "clip_cov_ratio", "clip_cov_ub", "clip_grad", "clip_ratio", "clip_ratio_c",
    "clip_ratio_high", "clip_ratio_low", "cliprange_value", "entropy_coeff", "gamma",
    "gpu_memory_utilization", "grad_clip", "kl_coef", "kl_cov_ratio", "kl_loss_coef", "lam", "lr",
    "lr_warmup_steps_ratio", "min_lr_ratio", "mtp_loss_scaling_factor", "num_cycles",
    "over_sample_rate", "ppo_kl_coef", "rollout_is_threshold", "target_kl", "tau_neg", "tau_pos",
    "temperature", "top_p", "weight_decay", "weight_pow",
}

MIXED_PRECISION = {"param_dtype": None, "reduce_dtype": "fp32", "buffer_dtype": "fp32"}

# verlpp's own keys and the defaults verlpp deliberately keeps different from verl's
# (docs/training.md, "Coming from verl"). Dotted path -> value; applied after verl's tree.
OVERLAY = {
    # verl's placeholders (a model and a data set on its authors' machines): unset in verlpp,
    # so a run without them stops naming the key.
    "data.train_files": None,
    "data.val_files": None,
    "actor_rollout_ref.model.path": None,
    "critic.model.path": None,
    "reward_model.model.path": None,
    # verl's `???` (must be given): verlpp generates with its own engine.
    "actor_rollout_ref.rollout.name": "verlpp",
    "reward_model.rollout.name": None,
    # verl's defaults need a network service or a GPU cluster layout.
    "trainer.logger": ["console"],
    "trainer.nnodes": None,
    "trainer.n_gpus_per_node": None,
    "trainer.device": "auto",
    # verl's 2 does not fit one rank (verl refuses it there too): one whole engine per rank
    # fits any launch; a script that sets it gets what it sets.
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    # verl's FSDP worker reads fsdp_config.mixed_precision when present; verlpp's tree has it.
    "actor_rollout_ref.actor.fsdp_config.mixed_precision": dict(MIXED_PRECISION),
    "critic.model.fsdp_config.mixed_precision": dict(MIXED_PRECISION),
    # verlpp's own keys.
    "actor_rollout_ref.rollout.block_size": 16,
    "trainer.dist_timeout_s": 600,
    "trainer.resource_pools": None,
    "trainer.role_pools": {},
    "trainer.zero_stage": 0,
    "trainer.seed": 1,
    "sft": {
        "enable": False, "train_files": None, "response_key": "response", "total_steps": 100,
        "batch_size": 64, "micro_batch_size_per_gpu": 64, "test_freq": -1, "seed": 1,
        "optim": {"lr": 1e-4, "lr_warmup_steps_ratio": 0.1, "lr_scheduler_type": "cosine",
                  "warmup_style": None, "min_lr_ratio": 0.1, "weight_decay": 0.0,
                  "betas": [0.9, 0.999], "grad_clip": 1.0},
    },
    "verlpp": {
        "model": {"fused_training_projections": None, "sdpa_gqa": True},
        "rollout": {"device_graphs": True, "decode_overlap": True, "rotary_attention": True},
        "train": {"rotary_qkv": True},
        "kernels": {"streams": True},
        "demo": {"enabled": False, "max_operand": 99, "operators": "+", "seed": 1, "init_seed": 1,
                 "sft_count": 2000, "train_count": 2000, "val_count": 200, "sft_carry_error": 0.0},
    },
}

SELECT = re.compile(r"\$\{oc\.select:\s*([^,}]+?)\s*(?:,[^}]*)?\}")
RELATIVE = re.compile(r"\$\{(\.+)([A-Za-z_][\w.]*)\}")


def interpolations(value, path):
    """verl's `${oc.select:a.b,default}` and relative `${.x}` as verlpp's absolute `${a.b}`."""
    if not isinstance(value, str) or "${" not in value:
        return value
    value = SELECT.sub(lambda m: "${" + m.group(1) + "}", value)

    def absolute(m):
        parent = path.split(".")[:-1]
        up = len(m.group(1)) - 1
        base = parent[: len(parent) - up] if up else parent
        return "${" + ".".join(base + [m.group(2)]) + "}"

    return RELATIVE.sub(absolute, value)


def convert(node, path=""):
    if isinstance(node, dict):
        return {str(k): convert(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [convert(v, path) for v in node]
    leaf = path.rsplit(".", 1)[-1]
    if leaf in FLOAT_LEAVES and isinstance(node, int) and not isinstance(node, bool):
        return float(node)
    if node == "???":
        return None
    return interpolations(node, path)


def set_path(tree, dotted, value):
    parts = dotted.split(".")
    for p in parts[:-1]:
        tree = tree.setdefault(p, {})
    tree[parts[-1]] = value


def get_path(tree, dotted):
    for p in dotted.split("."):
        if not isinstance(tree, dict) or p not in tree:
            return None, False
        tree = tree[p]
    return tree, True


def leaves(node, prefix=""):
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix


def check_references(tree, node):
    """Every `${a.b}` must name a key of the tree (verlpp resolves nothing else)."""
    if isinstance(node, dict):
        for v in node.values():
            check_references(tree, v)
    elif isinstance(node, str):
        for ref in re.findall(r"\$\{([^}]*)\}", node):
            if not get_path(tree, ref)[1]:
                sys.exit(f"unresolvable reference ${{{ref}}}")


def render(value, indent=0, width=110):
    """JSON with short objects and lists kept on one line."""
    one_line = json.dumps(value, separators=(", ", ": "))
    if not isinstance(value, dict) or not value or len(one_line) + indent <= width and indent > 0:
        return one_line
    pad = " " * (indent + 2)
    items = [f'{pad}{json.dumps(k)}: {render(v, indent + 2, width)}' for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    verl = yaml.safe_load(open(sys.argv[1]))
    commit = sys.argv[2]
    tree = convert(verl)
    for dotted, value in OVERLAY.items():
        set_path(tree, dotted, value)
    check_references(tree, tree)

    cpp_path = "src/core/controller/config_defaults.cpp"
    cpp = open(cpp_path).read()
    begin, end = cpp.index('R"json(') + len('R"json('), cpp.index(')json"')
    cpp = cpp[:begin] + render(tree) + cpp[end:]
    cpp = re.sub(r"verl commit [0-9a-f]{40}", f"verl commit {commit}", cpp)
    open(cpp_path, "w").write(cpp)

    with open("tests/controller/verl_ppo_trainer_keys.txt", "w") as out:
        out.write(f"# Leaf keys of verl's _generated_ppo_trainer.yaml at verl commit {commit}\n")
        for key in leaves(verl):
            out.write(key + "\n")


if __name__ == "__main__":
    main()
