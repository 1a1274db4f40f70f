# Written for this engine's conformance suite: a python step's script, served over http
# by the suite's test server and fetched through the worker's egress check by
# engine.python_script.
def main(name, punctuation="!"):
    return {"greeting": "hello, " + name + punctuation}
