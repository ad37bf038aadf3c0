"""Parse Prometheus text from stdin with the official client's parser, and print the samples
as JSON: {"name{label=value,...}": value}. Any line the parser refuses ends with an error."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    samples = {}
    for family in text_string_to_metric_families(sys.stdin.read()):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}"] = s.value
    json.dump(samples, sys.stdout)


main()
