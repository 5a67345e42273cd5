#!/usr/bin/env python3
"""openapi-json.py IN.yaml OUT.json — docs/openapi.yaml as compact JSON, the
form miaosha-server compiles in and serves at GET /openapi.json.

Run by CMake when it configures (service/CMakeLists.txt), with Debian's
python3-yaml. Stricter than a plain yaml.safe_load, so that a mistake in
the YAML stops the build instead of changing the description silently:
a key written twice in one mapping is an error (safe_load keeps the last),
and so is a non-string key (YAML reads `200:` as an integer and `on:` as a
boolean; OpenAPI's keys are strings). Every internal "$ref" must resolve.
OUT is written only when its content changes. Exit 0, or 1 with the reason
on stderr."""
import json
import sys

import yaml


class StrictLoader(yaml.SafeLoader):
    pass


def mapping(loader, node, deep=False):
    loader.flatten_mapping(node)  # merge keys (<<) of aliases
    out = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is a {type(key).__name__}, not a string (quote it)",
                key_node.start_mark)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is written twice", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)


def refs(node, path="#"):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield path, v
            else:
                yield from refs(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from refs(v, f"{path}/{i}")


def resolve(doc, ref):
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def main():
    if len(sys.argv) != 3:
        print("usage: openapi-json.py IN.yaml OUT.json", file=sys.stderr)
        return 2
    src, dst = sys.argv[1], sys.argv[2]
    try:
        with open(src, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=StrictLoader)
    except (OSError, yaml.YAMLError) as e:
        print(f"openapi-json: {src}: {e}", file=sys.stderr)
        return 1
    bad = [(p, r) for p, r in refs(doc) if not (r.startswith("#/") and resolve(doc, r))]
    for p, r in bad:
        print(f"openapi-json: {src}: {p}: $ref {r} does not resolve", file=sys.stderr)
    if bad:
        return 1
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=True) + "\n"
    try:
        with open(dst, encoding="utf-8") as f:
            if f.read() == text:
                return 0
    except OSError:
        pass
    with open(dst, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
