# NoETL python tool runner: reads the step input as JSON on stdin, runs the step code with
# the input bound as top-level variables, and writes the value of `result` as JSON to the
# file named by argv[2].
import importlib
import inspect
import json
import sys
import textwrap


def _main():
    code_path, result_path = sys.argv[1], sys.argv[2]
    with open(code_path, encoding="utf-8") as f:
        code = f.read()
    request = json.load(sys.stdin)
    data = request.get("input")
    if not isinstance(data, dict):
        data = {"input": data}
    scope = {"__name__": "__noetl_step__", "input_data": data, "args": dict(data), "context": dict(data)}
    # Legacy `libs: {alias: module}` imports modules under the given names.
    for alias, module in (request.get("libs") or {}).items():
        scope[alias] = importlib.import_module(str(module))
    scope.update(data)
    try:
        compiled = compile(code, "<step>", "exec")
        wrapped = False
    except SyntaxError as err:
        if "'return' outside function" not in str(err):
            raise
        # A top-level return is accepted: the code runs as the body of a function.
        body = "def __noetl_body__():\n" + textwrap.indent(code, "    ") + "\n"
        compiled = compile(body, "<step>", "exec")
        wrapped = True
    exec(compiled, scope)
    if wrapped:
        result = scope["__noetl_body__"]()
    elif "result" in scope:
        result = scope["result"]
    elif callable(scope.get("main")):
        fn = scope["main"]
        params = inspect.signature(fn).parameters
        if any(p.kind == p.VAR_KEYWORD for p in params.values()):
            result = fn(**data)
        else:
            result = fn(**{k: v for k, v in data.items() if k in params})
    else:
        result = None
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f, default=str)


_main()
