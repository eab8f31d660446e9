// A RAG agent on LangChain.js v1 (`createAgent` from "langchain", a ChatOpenAI model, one
// tool), traced into Langfuse as Langfuse's LangChain guide says for JS/TS
// (langfuse.com/integrations/frameworks/langchain): the OpenTelemetry NodeSDK with
// @langfuse/otel's LangfuseSpanProcessor, and @langfuse/langchain's CallbackHandler passed in
// the `callbacks` of `invoke`'s config. The retrieval is a tool the model calls, defined with
// LangChain's `tool()`: it searches the knowledge base, reranks the candidates with a
// cross-encoder and returns the kept chunks as JSON text (`JSON.stringify` of
// `{id, title, text, relevance_score}` objects), which LangChain hands the model as a
// tool-role message and the handler records inside the generation's input (JSON text inside
// a JSON string).
//
// tests/instrumentations/apps/langchain_js_agent.py runs it with the environment generate.py
// sets (LANGFUSE_BASE_URL and keys, OPENAI_BASE_URL = the local stub, which serves only
// /v1/chat/completions) and hands it, on stdin, what the Python side's knowledge base holds:
// per question the vector search's 5 candidates and the fixed cross-encoder's ranking of the
// kept ones.
import { LANGFUSE_SDK_VERSION } from "@langfuse/core";
import { CallbackHandler } from "@langfuse/langchain";
import { LangfuseSpanProcessor } from "@langfuse/otel";
import { ChatOpenAI } from "@langchain/openai";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { NodeSDK } from "@opentelemetry/sdk-node";
import { createAgent, tool } from "langchain";
import { z } from "zod";

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
const langfuseSpanProcessor = new LangfuseSpanProcessor({ exporter });
const sdk = new NodeSDK({ spanProcessors: [langfuseSpanProcessor] });
sdk.start();

// ---- the app -----------------------------------------------------------------------------------
const { model: modelId, systemPrompt, scenarios } = JSON.parse(await readStdin());
const knowledgeBase = new Map(scenarios.map((s) => [s.question, s]));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The vector search (the app's database; not traced) and a cross-encoder reranking its
// candidates: the fixed cross-encoder's ranking of the Python side (kit.rerank_ids).
async function searchAndRerank(query) {
  await sleep(15);
  const entry = knowledgeBase.get(query);
  const byId = new Map(entry.candidates.map((c) => [c.id, c]));
  await sleep(15);
  return entry.reranked.map(({ id, score }) => ({
    id,
    title: byId.get(id).title,
    text: byId.get(id).text,
    relevance_score: score,
  }));
}

const searchKnowledgeBase = tool(
  async ({ query }) => JSON.stringify(await searchAndRerank(query)),
  {
    name: "search_knowledge_base",
    description:
      "Search the support knowledge base. Returns the relevant passages, most relevant " +
      "first; cite the n-th passage as [n].",
    schema: z.object({ query: z.string().describe("What to look up.") }),
  },
);

const agent = createAgent({
  model: new ChatOpenAI({
    model: modelId,
    temperature: 0,
    maxRetries: 0,
    configuration: { baseURL: process.env.OPENAI_BASE_URL },
  }),
  tools: [searchKnowledgeBase],
  systemPrompt,
  name: "support_agent",
});

const langfuseHandler = new CallbackHandler();
try {
  for (const { question } of scenarios) {
    await agent.invoke(
      { messages: [{ role: "user", content: question }] },
      { callbacks: [langfuseHandler] },
    );
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
