// A RAG agent on the Vercel AI SDK, traced into Langfuse as Langfuse's Vercel AI SDK guide
// says (langfuse.com/integrations/frameworks/vercel-ai-sdk): the OpenTelemetry NodeSDK with
// @langfuse/otel's LangfuseSpanProcessor, and `experimental_telemetry: { isEnabled: true }` on
// the AI SDK calls. The retrieval is a tool the model calls, the shape of the AI SDK's own RAG
// guide (ai-sdk.dev/cookbook/guides/rag-chatbot: a `getInformation` tool running the vector
// search); the tool reranks the search's candidates with the AI SDK's `rerank()` (as with
// `cohere.reranking(...)`), here a fixed cross-encoder behind the RerankingModelV3 interface.
//
// tests/instrumentations/apps/vercel_ai.py runs it with the environment generate.py sets
// (LANGFUSE_BASE_URL and keys, OPENAI_BASE_URL = the local stub, which serves only
// /v1/chat/completions, hence `.chat(model)`) and hands it, on stdin, what the Python side's
// knowledge base holds: per question the vector search's 5 candidates (similarity) and the
// fixed cross-encoder's ranking of the kept ones.
import { createOpenAI } from "@ai-sdk/openai";
import { LANGFUSE_SDK_VERSION } from "@langfuse/core";
import { LangfuseSpanProcessor } from "@langfuse/otel";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { NodeSDK } from "@opentelemetry/sdk-node";
import { generateText, rerank, stepCountIs, tool } from "ai";
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
export const langfuseSpanProcessor = new LangfuseSpanProcessor({ exporter });
const sdk = new NodeSDK({ spanProcessors: [langfuseSpanProcessor] });
sdk.start();

// ---- the app -----------------------------------------------------------------------------------
const { model: modelId, systemPrompt, scenarios } = JSON.parse(await readStdin());
const knowledgeBase = new Map(scenarios.map((s) => [s.question, s]));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL });
const model = openai.chat(modelId);
const telemetry = (extra = {}) => ({
  isEnabled: true,
  functionId: "rag-answer",
  metadata: { knowledgeBase: "support-kb", ...extra },
});

// The vector store: the rows of the similarity query (the app's database; not traced).
async function findRelevantContent(query) {
  await sleep(15);
  return knowledgeBase.get(query).candidates.map((c) => ({
    id: c.id,
    docId: c.docId,
    title: c.title,
    content: c.text,
    similarity: c.similarity,
  }));
}

// A cross-encoder behind the AI SDK's reranking-model interface: its ranking is the fixed
// cross-encoder's of the Python side (kit.rerank_ids), handed over with the candidates.
const crossEncoder = {
  specificationVersion: "v3",
  provider: "local",
  modelId: "fixed-cross-encoder",
  async doRerank({ documents, query, topN }) {
    await sleep(15);
    const ids = documents.values.map((document) => document.id);
    const ranking = knowledgeBase
      .get(query)
      .reranked.map(({ id, score }) => ({ index: ids.indexOf(id), relevanceScore: score }));
    return { ranking: ranking.slice(0, topN ?? ranking.length) };
  },
};

const searchKnowledgeBase = tool({
  description:
    "Search the support knowledge base. Returns the relevant passages, most relevant first; " +
    "cite the n-th passage as [n].",
  inputSchema: z.object({ query: z.string().describe("the user's question") }),
  execute: async ({ query }) => {
    const candidates = await findRelevantContent(query);
    const { ranking } = await rerank({
      model: crossEncoder,
      documents: candidates,
      query,
      topN: knowledgeBase.get(query).reranked.length,
      experimental_telemetry: telemetry(),
    });
    return ranking.map(({ document, score }) => ({
      id: document.id,
      docId: document.docId,
      title: document.title,
      content: document.content,
      relevanceScore: score,
    }));
  },
});

async function answer(question) {
  const { text } = await generateText({
    model,
    system: systemPrompt,
    prompt: question,
    tools: { searchKnowledgeBase },
    stopWhen: stepCountIs(5),
    temperature: 0,
    experimental_telemetry: telemetry(),
  });
  return text;
}

try {
  for (const { question } of scenarios) {
    await answer(question);
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
