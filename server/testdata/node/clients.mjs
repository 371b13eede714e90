// Stock clients against a grok test server: the official ollama and
// openai npm packages. server/clients_test.go runs this with GROK_URL,
// GROK_KEY and GROK_MODEL set and checks the JSON it prints (one object).
import { Ollama } from 'ollama';
import OpenAI from 'openai';

const base = process.env.GROK_URL;
const key = process.env.GROK_KEY;
const model = process.env.GROK_MODEL;
const prompt = 'In the beginning God';
const greedy = { temperature: 0, repeat_penalty: 1, num_predict: 8 };
const out = {};

const ollama = new Ollama({ host: base, headers: { Authorization: `Bearer ${key}` } });
out.version = (await ollama.version()).version;
out.tags = (await ollama.list()).models.map((m) => m.name);
out.show = (await ollama.show({ model })).details;
out.ps = (await ollama.ps()).models.map((m) => m.name);
const g = await ollama.generate({ model, prompt, stream: false, options: greedy });
out.generate = { response: g.response, done: g.done, done_reason: g.done_reason, eval_count: g.eval_count,
  has_durations: [g.total_duration, g.prompt_eval_duration, g.eval_duration].every((d) => d > 0) };
let streamed = '';
let last;
for await (const part of await ollama.generate({ model, prompt, stream: true, options: greedy })) {
  streamed += part.response;
  last = part;
}
out.generateStream = { response: streamed, done: last.done, eval_count: last.eval_count };
const messages = [{ role: 'user', content: 'Who made the heaven?' }];
const c = await ollama.chat({ model, messages, stream: false, options: greedy });
let chatStreamed = '';
for await (const part of await ollama.chat({ model, messages, stream: true, options: greedy })) {
  chatStreamed += part.message.content;
}
out.chat = { role: c.message.role, content: c.message.content, streamed: chatStreamed };
try {
  await new Ollama({ host: base }).list();
  out.ollamaNoKey = 'no error';
} catch (e) {
  out.ollamaNoKey = { status: e.status_code, message: String(e.error ?? e.message) };
}
try {
  await ollama.generate({ model: 'no-such-model', prompt, stream: false });
  out.ollamaBadModel = 'no error';
} catch (e) {
  out.ollamaBadModel = { status: e.status_code, message: String(e.error ?? e.message) };
}

const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
out.models = (await openai.models.list()).data.map((m) => m.id);
const cp = await openai.completions.create({ model, prompt, max_tokens: 8, temperature: 0 });
out.completion = cp.choices[0].text;
let oaStream = '';
const stream = await openai.chat.completions.create({ model, messages, temperature: 0, max_tokens: 8, stream: true });
for await (const chunk of stream) {
  oaStream += chunk.choices[0]?.delta?.content ?? '';
}
out.chatStream = oaStream;
try {
  await new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong', maxRetries: 0 }).models.list();
  out.openaiBadKey = 'no error';
} catch (e) {
  out.openaiBadKey = { status: e.status, name: e.constructor.name, code: e.code };
}
console.log(JSON.stringify(out));
