# NoETL python tool runner: reads the step input as JSON on stdin, runs the step code with
# the input bound as top-level variables, and writes the value of `result` as JSON to the
# file named by argv[2]. When the run fails it writes the failure as JSON to the file named
# by argv[3] and exits 1: {"type", "message", "frames": [{"line", "name"}], "during"}, where
# frames are the step code's own frames only (outermost first, innermost last) and during
# says what the runner was doing when the failure came from outside the step code.
import ast
import importlib
import inspect
import json
import sys

# The file name the step code is compiled under: its frames are the ones a failure reports.
STEP_FILE = "<step>"
# The function a step with a top-level return runs as; its frames are the step's top level.
BODY = "__noetl_body__"


def _compile(code):
    try:
        return compile(code, STEP_FILE, "exec"), False
    except SyntaxError as err:
        if err.msg != "'return' outside function":
            raise
    # A top-level return is accepted: the code runs as the body of a function. The body is
    # moved into the function as parsed, so its line numbers and string literals stay as
    # written.
    tree = ast.parse(code, STEP_FILE)
    fn = ast.parse("def " + BODY + "():\n    pass\n").body[0]
    fn.body = tree.body
    tree.body = [fn]
    ast.fix_missing_locations(tree)
    return compile(tree, STEP_FILE, "exec"), True


def _run(code_path, result_path, state):
    state["during"] = "reading the input"
    with open(code_path, encoding="utf-8") as f:
        code = f.read()
    request = json.load(sys.stdin)
    data = request.get("input")
    if not isinstance(data, dict):
        data = {"input": data}
    scope = {"__name__": "__noetl_step__", "input_data": data, "args": dict(data), "context": dict(data)}
    # Legacy `libs:` imports modules under the given names: {alias: module} is `import
    # module as alias`, {alias: {from, import}} is `from module import name as alias`.
    for alias, spec in (request.get("libs") or {}).items():
        scope[alias] = _import_lib(alias, spec, state)
    scope.update(data)
    state["during"] = "compiling the code"
    compiled, wrapped = _compile(code)
    state["during"] = "running the code"
    exec(compiled, scope)
    if wrapped:
        result = scope[BODY]()
    elif "result" in scope:
        result = scope["result"]
    elif callable(scope.get("main")):
        state["during"] = "calling main"
        fn = scope["main"]
        params = inspect.signature(fn).parameters
        if any(p.kind == p.VAR_KEYWORD for p in params.values()):
            result = fn(**data)
        else:
            result = fn(**{k: v for k, v in data.items() if k in params})
    else:
        result = None
    state["during"] = "writing the result"
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f, default=str)


def _import_lib(alias, spec, state):
    if isinstance(spec, dict):
        origin, name = str(spec["from"]), str(spec["import"])
        state["during"] = "importing %s from %s as %s (libs)" % (name, origin, alias)
        module = importlib.import_module(origin)
        if hasattr(module, name):
            return getattr(module, name)
        return importlib.import_module(origin + "." + name)
    state["during"] = "importing %s as %s (libs)" % (spec, alias)
    return importlib.import_module(str(spec))


def _type_name(exc):
    t = type(exc)
    if t.__module__ in ("builtins", "__main__", "__noetl_step__"):
        return t.__qualname__
    return t.__module__ + "." + t.__qualname__


def _text(exc):
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ fails still reports its type
        return "<unprintable %s>" % type(exc).__name__


def _failure(exc, during):
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        co = tb.tb_frame.f_code
        if co.co_filename == STEP_FILE:
            name = co.co_name
            frames.append({"line": tb.tb_lineno, "name": "" if name in ("<module>", BODY) else name})
        tb = tb.tb_next
    message = _text(exc)
    if isinstance(exc, SyntaxError) and exc.filename == STEP_FILE:
        # The step code itself does not compile: the position is the error's own.
        message = exc.msg or ""
        if exc.lineno:
            frames = [{"line": exc.lineno, "name": ""}]
    return {"type": _type_name(exc), "message": message, "frames": frames, "during": "" if frames else during}


def _main():
    code_path, result_path, error_path = sys.argv[1], sys.argv[2], sys.argv[3]
    state = {"during": ""}
    try:
        _run(code_path, result_path, state)
    except Exception as exc:
        failure = _failure(exc, state["during"])
        with open(error_path, "w", encoding="utf-8") as f:
            json.dump(failure, f)
        sys.exit(1)


_main()
