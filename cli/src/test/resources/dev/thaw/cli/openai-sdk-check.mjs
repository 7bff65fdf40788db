// Drives a thaw serve through the official OpenAI JS SDK, as a user would: models, completions, chat, streaming
// with usage, and the error classes the SDK maps statuses to. Prints one JSON object of what it saw; exits 1 on
// the first check that fails, naming it.
//   node openai-sdk-check.mjs <node_modules dir> <base URL> <model>
import { createRequire } from "node:module";
import path from "node:path";

const [modules, baseURL, model, endOfTurn] = process.argv.slice(2);
const require = createRequire(path.join(modules, "noop.js"));
const OpenAI = require("openai").default ?? require("openai");
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const seen = {};

function check(cond, what) {
  if (!cond) {
    console.log(JSON.stringify({ failed: what, seen }));
    process.exit(1);
  }
}

async function expectError(what, cls, call) {
  try {
    await call();
  } catch (e) {
    check(e instanceof cls, `${what}: ${e?.constructor?.name} (${e?.status}) instead of ${cls.name}`);
    seen[what] = { status: e.status, type: e.type, code: e.code, param: e.param };
    return;
  }
  check(false, `${what}: no error`);
}

const list = await client.models.list();
seen.models = list.data.map((m) => m.id);
check(seen.models.includes(model), "models.list names the model");
const one = await client.models.retrieve(model);
check(one.id === model && one.object === "model", "models.retrieve");

const completion = await client.completions.create({ model, prompt: "hello world", max_tokens: 6, temperature: 0 });
seen.completion = completion.choices[0];
check(completion.object === "text_completion" && completion.usage.completion_tokens > 0, "completions.create");

const sampled = await client.completions.create({ model, prompt: "hello", max_tokens: 6, temperature: 0.7, n: 2,
  seed: 5, top_p: 0.9, presence_penalty: 0.5, logprobs: 2, echo: false, stop: ["\n\n"] });
check(sampled.choices.length === 2 && sampled.choices[0].logprobs.tokens.length > 0, "sampling, n, logprobs, stop");

const chat = await client.chat.completions.create({ model, max_tokens: 6, temperature: 0,
  messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hello" }] });
seen.chat = chat.choices[0];
check(chat.object === "chat.completion" && chat.choices[0].message.role === "assistant", "chat.completions.create");

const stream = await client.chat.completions.create({ model, max_tokens: 6, temperature: 0, stream: true,
  stream_options: { include_usage: true }, messages: [{ role: "user", content: "hello" }] });
let text = "";
let usage = null;
let chunks = 0;
const arrivals = [];
for await (const chunk of stream) {
  chunks++;
  arrivals.push(Date.now());
  if (chunk.usage) {
    usage = chunk.usage;
  }
  for (const c of chunk.choices) {
    text += c.delta?.content ?? "";
  }
}
seen.stream = { chunks, text, usage, spreadMillis: arrivals[arrivals.length - 1] - arrivals[0] };
const whole = await client.chat.completions.create({ model, max_tokens: 6, temperature: 0,
  messages: [{ role: "user", content: "hello" }] });
check(text === whole.choices[0].message.content, "streamed deltas add up to the completion");
check(usage && usage.completion_tokens === whole.usage.completion_tokens, "stream_options.include_usage");

// A longer stream whose tokens leave as they are decoded: its first text arrives soon after the request (after the
// prompt pass) and the rest over the generation, so most of the time from the request to the last text lies between
// the first text and the last. Sent at once at the end, they would arrive together (that share near 0), whatever the
// machine's speed. The end of turn is banned so that it runs to max_tokens.
const start = performance.now();
const paced = await client.completions.create({ model, prompt: "hello", max_tokens: 110, temperature: 0,
  stream: true, logit_bias: { [endOfTurn]: -100 } });
const times = [];
for await (const chunk of paced) {
  if (chunk.choices.some((c) => c.text)) {
    times.push(performance.now());
  }
}
const spread = times[times.length - 1] - times[0];
const total = times[times.length - 1] - start;
seen.paced = { events: times.length, firstMillis: times[0] - start, spreadMillis: spread, totalMillis: total,
  spreadShare: spread / total };
check(times.length >= 10 && spread / total >= 0.5,
  `streamed chunks arrive over the generation, not at its end (${JSON.stringify(seen.paced)})`);

await expectError("unknown model", OpenAI.NotFoundError,
  () => client.completions.create({ model: "no-such-model", prompt: "a" }));
await expectError("bad temperature", OpenAI.BadRequestError,
  () => client.completions.create({ model, prompt: "a", temperature: 7 }));
await expectError("prompt past the context", OpenAI.BadRequestError,
  () => client.completions.create({ model, prompt: "x ".repeat(200), max_tokens: 4 }));
await expectError("unknown path", OpenAI.NotFoundError, () => client.embeddings.create({ model, input: "a" }));

console.log(JSON.stringify({ ok: true, seen }));
