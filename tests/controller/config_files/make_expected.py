#!/usr/bin/env python3
# Writes <name>.expected.json for each YAML fixture named on the command line: the document as
# PyYAML loads it with OmegaConf's two loader changes (omegaconf/_yaml.py: an extra float
# pattern that takes 1e-6 without a dot, and no timestamp typing), so the reference is PyYAML's
# own parser and typing, independent of verlpp. Floats JSON cannot hold are {"$float": "inf"}.
# Run: python3 make_expected.py yaml_scalars.yaml verl_generated_ppo_trainer.yaml
import json
import math
import re
import sys

import yaml


class OmegaConfLikeLoader(yaml.SafeLoader):
    pass


OmegaConfLikeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
        |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)
OmegaConfLikeLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in OmegaConfLikeLoader.yaml_implicit_resolvers.items()
}


def encode(value):
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, dict):
        # JSON keys: what json.dumps makes of PyYAML's typed keys (1 -> "1", True -> "true").
        return {json.dumps(k) if not isinstance(k, str) else k: encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encode(v) for v in value]
    return value


for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        document = yaml.load(f, Loader=OmegaConfLikeLoader)
    out = path.rsplit(".", 1)[0] + ".expected.json"
    with open(out, "w", encoding="utf-8") as f:
        json.dump(encode(document), f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    print("wrote", out)
