#include "page.h"

namespace headcount::serve {

const std::string& index_page() {
  static const std::string page = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>headcount serve</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; max-width: 860px; margin: 1.5em auto; padding: 0 1em; color: #222; }
  h1 { font-size: 1.4em; margin-bottom: .2em; } h2 { font-size: 1.1em; margin: 0 0 .6em; }
  section { border: 1px solid #ddd; border-radius: 8px; padding: 1em; margin: 1em 0; }
  .muted { color: #777; font-size: .9em; }
  #log > div { padding: .5em .7em; border-radius: 6px; margin: .4em 0; white-space: pre-wrap; }
  #log .user { background: #e8f0fe; } #log .assistant { background: #f3f3f3; min-height: 1.4em; }
  textarea, input[type=text], input[type=password] { width: 100%; box-sizing: border-box; font: inherit; padding: .4em; margin: .2em 0; }
  button { font: inherit; padding: .35em 1.1em; margin-top: .3em; }
  .meter { height: 14px; background: #eee; border-radius: 7px; overflow: hidden; margin-top: .3em; }
  .meter > div { height: 100%; width: 0; background: #1f77b4; }
  output { font-weight: 600; font-variant-numeric: tabular-nums; }
  .error { color: #b00020; }
</style>
</head>
<body>
<h1>headcount serve</h1>
<p class="muted" id="models">asking GET /v1/models&hellip;</p>
<p><label>API key, if the server was started with one
  <input id="key" type="password" autocomplete="off" placeholder="(none)"></label></p>

<section id="chat-panel" hidden>
  <h2>Chat with <span id="decoder-name"></span></h2>
  <div id="log"></div>
  <form id="chat-form">
    <textarea id="message" rows="2" placeholder="Ask something (Enter sends, Shift+Enter breaks the line)"></textarea>
    <button id="send" type="submit">Send</button>
    <label class="muted"><input id="greedy" type="checkbox" checked> greedy (temperature 0)</label>
    <span class="muted" id="chat-stats"></span>
  </form>
</section>

<section id="similarity-panel" hidden>
  <h2>How similar are two sentences? (<span id="encoder-name"></span>)</h2>
  <input id="first" type="text" value="A girl is styling her hair.">
  <input id="second" type="text" value="A girl is brushing her hair.">
  <button id="compare" type="button">Compare</button>
  <p>cosine similarity: <output id="cosine">&ndash;</output></p>
  <div class="meter"><div id="bar"></div></div>
</section>

<script>
"use strict";
const $ = (id) => document.getElementById(id);
const models = { decoder: null, encoder: null };
const history = [];

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

async function errorText(response) {
  try { return response.status + ": " + (await response.json()).error.message; }
  catch (e) { return String(response.status); }
}

async function loadModels() {
  const response = await fetch("/v1/models", { headers: headers() });
  if (!response.ok) { $("models").innerHTML = '<span class="error">GET /v1/models ' + await errorText(response) + "</span>"; return false; }
  const list = (await response.json()).data;
  for (const m of list) {
    if (m.kind === "completion") models.decoder = m.id;
    if (m.kind === "embedding") models.encoder = m.id;
  }
  $("models").textContent = "models: " + list.map((m) => m.id + " (" + m.kind + ")").join(", ");
  if (models.decoder) { $("chat-panel").hidden = false; $("decoder-name").textContent = models.decoder; }
  if (models.encoder) { $("similarity-panel").hidden = false; $("encoder-name").textContent = models.encoder; }
  return true;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = role;
  div.textContent = text;
  $("log").appendChild(div);
  return div;
}

// One chat turn, streamed: the server-sent events are read as they arrive.
async function chat(text, maxTokens) {
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const out = addMessage("assistant", "");
  const body = { model: models.decoder, messages: history, stream: true, max_tokens: maxTokens,
                 stream_options: { include_usage: true } };
  if ($("greedy").checked) body.temperature = 0;
  const start = performance.now();
  let first = 0, tokens = 0, answer = "";
  const response = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body) });
  if (!response.ok) { out.className += " error"; out.textContent = await errorText(response); history.pop(); return; }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      const data = JSON.parse(event.slice(6));
      if (data.error) { out.textContent += " [" + data.error.message + "]"; continue; }
      if (data.usage) tokens = data.usage.completion_tokens;
      for (const choice of data.choices) {
        if (choice.delta && choice.delta.content) {
          if (!first) first = performance.now();
          answer += choice.delta.content;
          out.textContent = answer;
        }
      }
    }
  }
  history.push({ role: "assistant", content: answer });
  const seconds = (performance.now() - start) / 1000;
  $("chat-stats").textContent = "· " + tokens + " tokens, the first after " + ((first - start) / 1000).toFixed(2) +
      " s, " + (tokens / seconds).toFixed(1) + " tokens/s";
  out.dataset.done = "1";
}

async function compare() {
  const input = [$("first").value, $("second").value];
  const response = await fetch("/v1/embeddings", { method: "POST", headers: headers(),
      body: JSON.stringify({ model: models.encoder, input: input, encoding_format: "float" }) });
  if (!response.ok) { $("cosine").innerHTML = '<span class="error">' + await errorText(response) + "</span>"; return; }
  const [a, b] = (await response.json()).data.map((d) => d.embedding);
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; ++i) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  const cosine = dot / Math.sqrt(na * nb);
  $("cosine").textContent = cosine.toFixed(6);
  $("bar").style.width = (Math.max(0, cosine) * 100).toFixed(1) + "%";
}

$("chat-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("message").value.trim();
  if (!text) return;
  $("message").value = "";
  chat(text, 256);
});
$("message").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("chat-form").requestSubmit(); }
});
$("compare").addEventListener("click", compare);
$("key").addEventListener("change", loadModels);

(async () => {
  const params = new URLSearchParams(location.search);
  if (!(await loadModels())) return;
  if (params.get("demo") === "1") {  // the browser test: one turn and one comparison, then a mark
    if (models.decoder) await chat(params.get("prompt") || "What is 2+2?", 24);
    if (models.encoder) await compare();
    document.body.dataset.demo = "done";
  }
})();
</script>
</body>
</html>
)HTML";
  return page;
}

}  // namespace headcount::serve
