package tracing

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of OpenTelemetry's semantic conventions that sagad's spans
// carry beside their saga.* ones, so a tracing backend's messaging and
// generative-AI views understand them: messaging.* on the spans that
// process a NATS message, gen_ai.* on agent calls. The names are the
// conventions' own (messaging and gen-ai, development status), written out
// rather than imported from a semconv package whose version would pin them.
const (
	AttrMessagingSystem        = attribute.Key("messaging.system")
	AttrMessagingOperationType = attribute.Key("messaging.operation.type")
	AttrMessagingOperationName = attribute.Key("messaging.operation.name")
	AttrMessagingDestination   = attribute.Key("messaging.destination.name")
	AttrMessagingConsumerGroup = attribute.Key("messaging.consumer.group.name")

	AttrGenAISystem        = attribute.Key("gen_ai.system")
	AttrGenAIOperationName = attribute.Key("gen_ai.operation.name")
	AttrGenAIAgentName     = attribute.Key("gen_ai.agent.name")
	AttrGenAIRequestModel  = attribute.Key("gen_ai.request.model")
	AttrGenAIResponseModel = attribute.Key("gen_ai.response.model")
	AttrGenAIInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	AttrGenAIOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
)

// Values of those attributes.
const (
	// MessagingSystemNATS is messaging.system for NATS.
	MessagingSystemNATS = "nats"
	// GenAIOperationInvokeAgent is gen_ai.operation.name of an agent call
	// (an executor or a reviewer, whatever model is behind it).
	GenAIOperationInvokeAgent = "invoke_agent"
	// GenAIOperationChat is gen_ai.operation.name of one chat completion
	// a model executor makes.
	GenAIOperationChat = "chat"
	// GenAISystemOpenAI and GenAISystemAnthropic are gen_ai.system of the
	// two model providers sagad's dependencies speak to.
	GenAISystemOpenAI    = "openai"
	GenAISystemAnthropic = "anthropic"
)

// MessagingProcess are the attributes of a span that processes one NATS
// message published on subject and delivered by the JetStream consumer
// named consumer ("" when a plain subscription delivered it).
func MessagingProcess(subject, consumer string) []attribute.KeyValue {
	a := []attribute.KeyValue{
		AttrMessagingSystem.String(MessagingSystemNATS),
		AttrMessagingOperationType.String("process"),
		AttrMessagingOperationName.String("process"),
		AttrMessagingDestination.String(subject),
	}
	if consumer != "" {
		a = append(a, AttrMessagingConsumerGroup.String(consumer))
	}
	return a
}

// GenAIRequest sets on span what a model call knows before it is sent: the
// provider (gen_ai.system, e.g. [GenAISystemOpenAI]), the operation
// ([GenAIOperationChat]) and the model asked for. Empty values are left
// out. A model executor calls it on the span of its call (the context's:
// trace.SpanFromContext(ctx)) or of a child it starts per request.
func GenAIRequest(span trace.Span, system, operation, model string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(nonEmpty(
		AttrGenAISystem.String(system),
		AttrGenAIOperationName.String(operation),
		AttrGenAIRequestModel.String(model),
	)...)
}

// GenAIResponse sets on span what the model's answer said: the model that
// answered and the tokens it counted in and out. A zero or negative count
// is left out (the provider did not say).
func GenAIResponse(span trace.Span, model string, inputTokens, outputTokens int64) {
	if !span.IsRecording() {
		return
	}
	a := nonEmpty(AttrGenAIResponseModel.String(model))
	if inputTokens > 0 {
		a = append(a, AttrGenAIInputTokens.Int64(inputTokens))
	}
	if outputTokens > 0 {
		a = append(a, AttrGenAIOutputTokens.Int64(outputTokens))
	}
	span.SetAttributes(a...)
}

// nonEmpty drops the string attributes whose value is "".
func nonEmpty(kvs ...attribute.KeyValue) []attribute.KeyValue {
	out := kvs[:0]
	for _, kv := range kvs {
		if kv.Value.Type() == attribute.STRING && kv.Value.AsString() == "" {
			continue
		}
		out = append(out, kv)
	}
	return out
}
