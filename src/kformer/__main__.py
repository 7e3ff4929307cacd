from kformer.cli import run

run()
