#!/usr/bin/env python3
"""Validate files runner wrote against runner's JSON Schemas, with an implementation of JSON
Schema other than the one that wrote them (Python's jsonschema, Draft 2020-12).

usage: validate.py SCHEMA FILE... — each FILE is one JSON document, or, when its name ends in
.jsonl or .ndjson, one document per line. Prints one line per invalid document and exits 1 when
any is invalid, 2 when a file cannot be read or is not JSON.
"""
import json
import sys

from jsonschema import Draft202012Validator


def documents(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith((".jsonl", ".ndjson")):
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                yield f"{path}:{n}", json.loads(line)
    else:
        yield path, json.loads(text)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    bad = 0
    count = 0
    for path in argv[2:]:
        try:
            docs = list(documents(path))
        except (OSError, ValueError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 2
        for where, doc in docs:
            count += 1
            for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
                bad += 1
                at = "/".join(str(p) for p in error.absolute_path) or "(root)"
                print(f"{where}: at {at}: {error.message}")
    print(f"{count} documents checked against {argv[1]}, {bad} errors", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
