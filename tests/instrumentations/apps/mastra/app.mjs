// A RAG agent on Mastra 1 (an Agent with one tool), traced into Langfuse as Langfuse's Mastra
// guide says (langfuse.com/integrations/frameworks/mastra, and Mastra's own Langfuse exporter
// docs): `new Mastra({ observability: new Observability({ configs: { langfuse: { serviceName,
// exporters: [new LangfuseExporter()] } } }) })`, the credentials and LANGFUSE_BASE_URL from the
// environment. The exporter converts Mastra's own tracing spans (agent run, model generation,
// model steps, tool calls) to OpenTelemetry GenAI spans and sends them through @langfuse/otel's
// LangfuseSpanProcessor (OTLP/JSON).
//
// The retrieval is a tool the agent calls (`createTool`): it searches the knowledge base,
// reranks the candidates with a cross-encoder and returns the kept chunks as objects
// `{id, title, text, relevanceScore}`; the AI SDK under Mastra hands them to the model as the
// tool message's JSON.
//
// tests/instrumentations/apps/mastra.py runs it with the environment generate.py sets
// (LANGFUSE_BASE_URL and keys, OPENAI_BASE_URL = the local stub, which serves only
// /v1/chat/completions, hence `.chat(model)`) and hands it, on stdin, what the Python side's
// knowledge base holds.
import { createOpenAI } from "@ai-sdk/openai";
import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { LangfuseExporter } from "@mastra/langfuse";
import { Observability } from "@mastra/observability";
import { z } from "zod";

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
    relevanceScore: score,
  }));
}

const searchKnowledgeBase = createTool({
  id: "search_knowledge_base",
  description:
    "Search the support knowledge base. Returns the relevant passages, most relevant first; " +
    "cite the n-th passage as [n].",
  inputSchema: z.object({ query: z.string().describe("What to look up.") }),
  execute: async ({ query }) => searchAndRerank(query),
});

const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL });
const supportAgent = new Agent({
  id: "support-agent",
  name: "Support agent",
  instructions: systemPrompt,
  model: openai.chat(modelId),
  tools: { searchKnowledgeBase },
});

const exporter = new LangfuseExporter();
const mastra = new Mastra({
  agents: { supportAgent },
  observability: new Observability({
    configs: { langfuse: { serviceName: "support-bot", exporters: [exporter] } },
  }),
});

try {
  const agent = mastra.getAgent("supportAgent");
  for (const { question } of scenarios) {
    await agent.generate(question, { maxSteps: 5, modelSettings: { temperature: 0 } });
  }
} finally {
  await mastra.shutdown?.();
  await exporter.shutdown?.();
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}
