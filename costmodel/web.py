"""``costmodel serve``: a local web page over the command line, and the command line as a JSON API.

The page computes nothing and holds no model of its own: ``GET /api/<command>?<option>=<value>`` runs ``costmodel
<command> --<option> <value> ... --json`` in this process and answers exactly what it prints (an option repeated in
the query is repeated on the command line; ``flag=`` or ``flag=true`` gives a bare flag), and
``GET /report/<command>?...`` answers the command's self-contained ``--html`` page. A model or device is one the
package ships (never a path on the serving machine); a model of one's own comes as ``config=<a config.json's
text>``, written to a private folder for that request only. A bad option answers the command's own ``Error:`` text
with status 400. The page's state is its URL: a link reproduces the view. Every
script and style is inline; nothing is fetched from anywhere. It needs the ``web`` extra (Starlette, and Uvicorn to
listen): ``pip install "costmodel[web]"``.
"""

from __future__ import annotations

import html
import threading

#: The commands the API answers (each prints ``--json``), and those with a page (``--html``).
COMMANDS = ("predict", "capacity", "plan", "derive")
PAGES = ("predict", "capacity", "plan", "derive")
#: Options that name files or choose the output: the API chooses its own output and writes no file.
NOT_OVER_THE_WEB = ("json", "html", "format", "out", "csv", "plot", "model-config", "save-profile")
#: The longest config.json the page takes pasted (a large model's is a few kB).
MAX_CONFIG_BYTES = 32 * 1024
#: The command line runs one call at a time (it prints to this process's standard output).
_LOCK = threading.Lock()


def arguments(command: str, query, known=COMMANDS) -> list[str]:
    """``costmodel`` arguments from a query's (key, value) pairs; CostModelError for what the API does not take."""
    from costmodel.errors import CostModelError

    if command not in known:
        raise CostModelError(f"unknown command {command!r}; this answers {', '.join(known)}")
    args = [command]
    for key, value in query:
        if key in NOT_OVER_THE_WEB:
            raise CostModelError(f"--{key} does not go over the web: the API answers JSON and /report/ the page")
        _shipped(key, value)
        args.append(f"--{key}")
        if value not in ("", "true"):
            args.append(value)
    return args


def _shipped(key: str, value: str) -> None:
    """Over the web a model or a device is one the package ships, never a path on this machine (a model of one's own
    is pasted as ``config``)."""
    from costmodel.catalog import is_listed
    from costmodel.errors import CostModelError
    from costmodel.presets import is_preset

    if key == "model" and not is_preset(value):
        raise CostModelError(f"model {value!r} is no preset id or alias; over the web a model of one's own is a pasted "
                             "config.json (config=<its text>), never a path")
    if key == "gpu" and not is_listed(value):
        raise CostModelError(f"gpu {value!r} is no profile id or alias (`costmodel hardware list`); over the web a "
                             "device is never a path")


def pasted(query) -> tuple[list, str | None]:
    """(the query without its pasted ``config``, that config.json's text or None); CostModelError when it is too
    long or comes with a model as well."""
    from costmodel.errors import CostModelError

    texts = [v for k, v in query if k == "config"]
    rest = [(k, v) for k, v in query if k != "config"]
    if not texts or not texts[0].strip():
        return rest, None
    if len(texts) > 1 or any(k == "model" for k, _ in rest):
        raise CostModelError("give one model: a preset (model=...) or a pasted config.json (config=...)")
    if len(texts[0].encode("utf-8")) > MAX_CONFIG_BYTES:
        raise CostModelError(f"a pasted config.json of more than {MAX_CONFIG_BYTES // 1024} kB")
    return rest, texts[0]


def run(cli, args: list[str]) -> tuple[int, str]:
    """(exit code, what the command printed), the command run in this process by ``cli`` (the command line's
    group, :data:`costmodel.cli.main`)."""
    from click.testing import CliRunner

    with _LOCK:
        result = CliRunner().invoke(cli, args)
    return result.exit_code, result.output


def app(cli):
    """The Starlette application over ``cli`` (the command line's group): ``/`` the page, ``/api/<command>`` JSON,
    ``/report/<command>`` the HTML page."""
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    from costmodel.errors import CostModelError

    def answer(request, output: str) -> Response:
        try:
            query, config = pasted(request.query_params.multi_items())
            args = arguments(request.path_params["command"], query, COMMANDS if output == "json" else PAGES)
        except CostModelError as err:
            return PlainTextResponse(f"Error: {err}\n", status_code=400)
        args += ["--json"] if output == "json" else ["--html", "-"]
        if config is None:
            code, text = run(cli, args)
        else:  # a pasted config.json lives in a private folder for this request only
            import tempfile
            from pathlib import Path

            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "pasted" / "config.json"
                path.parent.mkdir()
                path.write_text(config, encoding="utf-8")
                code, text = run(cli, [*args, "--model", str(path)])
            text = text.replace(str(path), "pasted config.json")  # the private folder means nothing to the reader
        if code != 0:
            return PlainTextResponse(text if text.startswith("Error:") else f"Error: {text}", status_code=400)
        if output == "json":
            return Response(text, media_type="application/json")
        return HTMLResponse(text)

    def endpoint(output: str):
        async def handle(request):
            from starlette.concurrency import run_in_threadpool

            return await run_in_threadpool(answer, request, output)

        return handle

    async def index(request):
        return HTMLResponse(page(cli))

    async def missing(request):
        return JSONResponse({"error": f"no such path {request.url.path!r}"}, status_code=404)

    routes = [Route("/", index), Route("/api/{command}", endpoint("json")),
              Route("/report/{command}", endpoint("html")),
              Route("/{path:path}", missing)]
    return Starlette(routes=routes)


def options(cli) -> dict[str, list[str]]:
    """Each page command's long option names (without ``--``), as the command line declares them; ``config`` goes
    with any command that takes a model."""
    out = {}
    for name in PAGES:
        names = {o[2:] for p in cli.commands[name].params for o in p.opts if o.startswith("--")}
        out[name] = sorted(names | ({"config"} if "model" in names else set()))
    return out


def page(cli) -> str:
    """The page: a form whose fields are the command line's options; submitting it puts in the URL those the chosen
    command takes (a field another command's is left out), and the page shows the report of that URL's query (so a
    link reproduces the view)."""
    import json

    from costmodel.catalog import profile_ids
    from costmodel.presets import preset_ids

    devices = "".join(f'<option value="{html.escape(i)}">{html.escape(i)}</option>' for i in profile_ids())
    models = "".join(f'<option value="{html.escape(i)}">' for i in preset_ids())
    return (PAGE.replace("{{devices}}", devices).replace("{{models}}", models)
            .replace("{{options}}", json.dumps(options(cli)).replace("</", "<\\/")))


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>costmodel</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1em 2em; color: #222; }
form { display: flex; flex-wrap: wrap; gap: 0.6em 1.2em; align-items: end; }
label { display: flex; flex-direction: column; font-size: 0.85em; }
iframe { width: 100%; height: 80vh; border: 1px solid #ccc; margin-top: 1em; }
#error { color: #a00; white-space: pre-wrap; }
</style>
</head>
<body>
<h1>costmodel</h1>
<form id="form" method="get" action="/">
<label>command <select name="command"><option>predict</option><option>capacity</option><option>plan</option>
<option>derive</option></select></label>
<label>devices <select name="gpu" multiple size="4">{{devices}}</select></label>
<label>model <input name="model" list="models" placeholder="llama-3-8b"><datalist id="models">{{models}}</datalist></label>
<label>or its config.json, pasted <textarea name="config" rows="2" cols="28"
placeholder='{"hidden_size": 4096, ...}'></textarea></label>
<label>tensor parallel <input name="tp" type="number" min="1"></label>
<label>replicas <input name="replicas" type="number" min="1"></label>
<label>pipeline stages <input name="pipeline-parallel-size" type="number" min="1"></label>
<label>attention data parallel <input name="attention-dp" type="number" min="1"></label>
<label>expert parallel <input name="expert-parallel" type="checkbox"></label>
<label>GPUs to place it on (plan) <input name="gpus" type="number" min="1"></label>
<label>engine <select name="engine"><option value="">(none: one step)</option><option>vllm</option>
<option>sglang</option><option>trtllm</option></select></label>
<label>clients <input name="concurrency" type="number" min="1"></label>
<label>input tokens <input name="input-len" type="number" min="1"></label>
<label>output tokens <input name="output-len" type="number" min="1"></label>
<label>batch <input name="batch" type="number" min="1"></label>
<label>context <input name="context" type="number" min="1"></label>
<label>weights <select name="weight-dtype"><option value="">(the checkpoint's)</option><option>bf16</option>
<option>fp8</option><option>fp8_block</option><option>int8</option><option>int4</option><option>mxfp4</option>
<option>nvfp4</option></select></label>
<label>KV cache <select name="kv-dtype"><option value="">(the engine's)</option><option>bf16</option>
<option>fp8</option></select></label>
<label>TPOT target (ms) <input name="tpot-ms" type="number" min="0" step="any"></label>
<label>TTFT target (ms) <input name="ttft-ms" type="number" min="0" step="any"></label>
<label>MHA, GQA, MQA and MLA side by side (predict) <input name="variants" type="checkbox"></label>
<label>attention (derive) <select name="variant"><option value="">(the model's)</option><option>mha</option>
<option>gqa</option><option>mqa</option><option>mla</option></select></label>
<label>mode (derive) <select name="mode"><option value="">incremental</option><option>generate</option>
<option>batched</option></select></label>
<label>the &Theta; forms (derive) <input name="asymptotic" type="checkbox"></label>
<button type="submit">show</button>
</form>
<p id="error"></p>
<iframe id="report" title="report"></iframe>
<script>
const form = document.getElementById('form');
const params = new URLSearchParams(window.location.search);
for (const [key, value] of params) {
  const field = form.elements[key];
  if (!field) continue;
  if (field.multiple) { for (const o of field.options) if (o.value === value) o.selected = true; }
  else if (field.type === 'checkbox') field.checked = true;
  else field.value = value;
}
const OPTIONS = {{options}};  // each command's options: a field another command's stays out of the URL
form.addEventListener('submit', (event) => {
  event.preventDefault();
  const query = new URLSearchParams();
  const takes = new Set(['command', ...OPTIONS[form.elements.command.value]]);
  for (const field of form.elements) {
    if (!field.name || !takes.has(field.name)) continue;
    if (field.multiple) { for (const o of field.selectedOptions) query.append(field.name, o.value); }
    else if (field.type === 'checkbox') { if (field.checked) query.append(field.name, ''); }
    else if (field.value !== '') query.append(field.name, field.value);
  }
  window.location.search = query.toString();
});
const report = document.getElementById('report');
report.addEventListener('load', () => {  // a plan's points open their own prediction
  for (const code of report.contentDocument.querySelectorAll('code.point')) {
    const a = report.contentDocument.createElement('a');
    a.href = '/?' + code.dataset.query;
    a.target = '_top';
    code.replaceWith(a);
    a.appendChild(code);
  }
});
async function show() {
  const command = params.get('command') || 'predict';
  const query = new URLSearchParams(params);
  query.delete('command');
  if (![...query.keys()].length) return;
  const response = await fetch('/report/' + command + '?' + query.toString());
  const text = await response.text();
  if (response.ok) { report.srcdoc = text; }
  else { document.getElementById('error').textContent = text; }
}
show();
</script>
</body>
</html>
"""
