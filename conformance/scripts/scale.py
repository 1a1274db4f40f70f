# Written for this engine's conformance suite: a python step's script, read from the
# worker's script directory (NOETL_WORKER_SCRIPT_DIR) by engine.python_script.
scaled = [v * factor for v in values]
result = {"scaled": scaled, "total": sum(scaled)}
