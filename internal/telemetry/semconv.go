package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	// The one place the semantic-conventions version is pinned (v1.40.0 is
	// the last Go package that holds the GenAI attributes). The GenAI
	// conventions are still marked development; a new version is adopted
	// here, with the names checked against docs/OBSERVABILITY.md.
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// SchemaURL is the schema of every span and metric toolgate records.
const SchemaURL = semconv.SchemaURL

// Attribute keys from the pinned conventions, and toolgate's own.
var (
	KeyOperationName    = semconv.GenAIOperationNameKey
	KeyToolName         = semconv.GenAIToolNameKey
	KeyToolCallID       = semconv.GenAIToolCallIDKey
	KeyToolType         = semconv.GenAIToolTypeKey
	KeyConversationID   = semconv.GenAIConversationIDKey
	KeyToolArguments    = semconv.GenAIToolCallArgumentsKey
	KeyToolResult       = semconv.GenAIToolCallResultKey
	KeyErrorType        = semconv.ErrorTypeKey
	KeyMsgSystem        = semconv.MessagingSystemKey
	KeyMsgOperationName = semconv.MessagingOperationNameKey
	KeyMsgOperationType = semconv.MessagingOperationTypeKey
	KeyMsgDestination   = semconv.MessagingDestinationNameKey
	KeyMsgTemplate      = semconv.MessagingDestinationTemplateKey
	KeyMsgID            = semconv.MessagingMessageIDKey
	KeyMsgConsumerGroup = semconv.MessagingConsumerGroupNameKey
	KeyMsgBodySize      = semconv.MessagingMessageBodySizeKey
	KeyMsgDeliveryCount = attribute.Key("messaging.nats.message.delivery_count")

	KeyAgent          = attribute.Key("toolgate.agent")
	KeyStatus         = attribute.Key("toolgate.status")
	KeyWorker         = attribute.Key("toolgate.worker")
	KeyPolicyAction   = attribute.Key("toolgate.policy.action")
	KeyPolicyRule     = attribute.Key("toolgate.policy.rule")
	KeyPolicyRevision = attribute.Key("toolgate.policy.revision")
	KeyResumed        = attribute.Key("toolgate.approval.resumed")
	KeyApprover       = attribute.Key("toolgate.approval.approver")
	KeyApprovalResult = attribute.Key("toolgate.approval.outcome")
)

// Values of the conventions' enumerations toolgate uses.
var (
	OperationExecuteTool = semconv.GenAIOperationNameExecuteTool
	MsgOperationProcess  = semconv.MessagingOperationTypeProcess
	MsgOperationSend     = semconv.MessagingOperationTypeSend
)

// ServiceName is the service.name resource attribute.
func ServiceName(s string) attribute.KeyValue { return semconv.ServiceName(s) }

// MessagingSystem is the messaging.system value for NATS (not in the
// conventions' list of well-known systems).
const MessagingSystem = "nats"

// EventPolicyDecision is the span event a policy decision is recorded as.
const EventPolicyDecision = "toolgate.policy.decision"
