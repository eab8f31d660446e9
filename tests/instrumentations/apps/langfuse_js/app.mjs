// A RAG answer traced with the Langfuse JS/TS SDK, set up as its docs say
// (langfuse.com/docs/observability/sdk/typescript/setup, .../instrumentation):
// the OpenTelemetry NodeSDK with the LangfuseSpanProcessor, `observe` wrappers typed with
// `asType`, and the OpenAI client wrapped with `observeOpenAI` (@langfuse/openai).
//
// tests/instrumentations/apps/langfuse_js.py runs it with the environment generate.py sets
// (LANGFUSE_BASE_URL and keys, OPENAI_BASE_URL = the local stub) and hands it, on stdin, what
// the Python side's knowledge base holds: per question the vector search's 5 candidates
// (similarity) and the fixed cross-encoder's scores of the kept ones, in reranked order.
import { LANGFUSE_SDK_VERSION } from "@langfuse/core";
import { observeOpenAI } from "@langfuse/openai";
import { LangfuseSpanProcessor } from "@langfuse/otel";
import { observe } from "@langfuse/tracing";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { NodeSDK } from "@opentelemetry/sdk-node";
import OpenAI from "openai";

// ---- instrumentation.ts ----------------------------------------------------------------------
// The processor's own exporter, with its own URL and headers, but speaking OTLP/protobuf
// instead of OTLP/JSON: the capture server decodes JSON with protobuf's JSON mapping, which
// reads ids as base64 while OTLP/JSON sends them as hex. The spans are the same either way.
const baseUrl = process.env.LANGFUSE_BASE_URL;
const publicKey = process.env.LANGFUSE_PUBLIC_KEY;
const secretKey = process.env.LANGFUSE_SECRET_KEY;
const exporter = new OTLPTraceExporter({
  url: `${baseUrl}/api/public/otel/v1/traces`,
  headers: {
    Authorization: `Basic ${Buffer.from(`${publicKey}:${secretKey}`).toString("base64")}`,
    "x-langfuse-sdk-name": "javascript",
    "x-langfuse-sdk-version": LANGFUSE_SDK_VERSION,
    "x-langfuse-public-key": publicKey,
  },
});
export const langfuseSpanProcessor = new LangfuseSpanProcessor({ exporter });
const sdk = new NodeSDK({ spanProcessors: [langfuseSpanProcessor] });
sdk.start();

// ---- the app -----------------------------------------------------------------------------------
const { model, systemPrompt, scenarios } = JSON.parse(await readStdin());
const knowledgeBase = new Map(scenarios.map((s) => [s.question, s]));
const openai = observeOpenAI(new OpenAI({ maxRetries: 0 }));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const retrieve = observe(
  async (question) => {
    await sleep(15); // the vector search
    return knowledgeBase.get(question).candidates.map((c) => ({
      id: c.id,
      text: c.text,
      score: c.similarity,
      metadata: { docId: c.docId, title: c.title },
    }));
  },
  { name: "retrieve", asType: "retriever" },
);

const rerank = observe(
  async (question, documents) => {
    await sleep(15); // the cross-encoder
    const byId = new Map(documents.map((d) => [d.id, d]));
    return knowledgeBase.get(question).reranked.map(({ id, score }) => ({ ...byId.get(id), score }));
  },
  { name: "rerank" },
);

const ragAnswer = observe(
  async (question) => {
    const candidates = await retrieve(question);
    const sources = await rerank(question, candidates);
    const numbered = sources.map((d, i) => `[${i + 1}] ${d.text}`).join("\n");
    const completion = await openai.chat.completions.create({
      model,
      temperature: 0,
      messages: [
        { role: "system", content: systemPrompt },
        { role: "user", content: `Sources:\n${numbered}\n\nQuestion: ${question}` },
      ],
    });
    return completion.choices[0].message.content;
  },
  { name: "rag-answer" },
);

try {
  for (const { question } of scenarios) {
    await ragAnswer(question);
  }
} finally {
  await langfuseSpanProcessor.forceFlush();
  await sdk.shutdown();
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}
