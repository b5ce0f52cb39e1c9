"""Speed and memory measurements of elmo-bilm; run each as a module from the repository root.

    .venv/bin/python -m benchmarks.bench_core --help

They print ratios measured in one run with the machine's CPU flags, and assert nothing;
`benchmarks.common` holds what they share. See benchmarks/README.md.
"""
