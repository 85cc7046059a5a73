# kaos-rs's authorization policy for KAOS's PDP (OPA with its Envoy ext_authz plugin), decision
# `data.kaos.authz.result`. It makes KAOS's decisions over KAOS's data (`data.kaos.*`, written by
# the authz controller next to this file in the policy ConfigMap):
#
# - Every request needs a verified subject: a user token (`Authorization`) from the user issuer,
#   or the token of an autonomous Agent acting for itself.
# - Entry (no `x-agent-authorization`): the user, or one of their groups, must be granted the
#   target by an AccessGrant (`data.kaos.user_grants`).
# - Internal hop (an Agent's token in `x-agent-authorization`): that Agent must be granted the
#   target (`data.kaos.grants`), and the subject it carries must still be valid.
# - Delegated egress (no target, token exchange): the Agent's OIDC client must match the
#   exchanged token's `azp`.
#
# Tokens are trusted only after their algorithm (RS256), issuer, audience and signature check
# out against `data.kaos.jwks[issuer]`; without keys nothing verifies and everything is denied.
# The target comes from the gateway path `/<namespace>/<kind>/<name>/...` only: headers a client
# sends are not trusted.
package kaos.authz

import rego.v1

algorithms := {"RS256"}

agent_audience := "kaos-gateway"

exchange_audience := "token-exchange-broker"

headers := input.attributes.request.http.headers

# --- the target -------------------------------------------------------------------------------

slug_of(kind) := "mcpserver" if kind == "mcp"

slug_of(kind) := kind if kind != "mcp"

target := sprintf("kaos://%v/%v/%v", [slug_of(input.parsed_path[1]), input.parsed_path[0], input.parsed_path[2]]) if {
	count(input.parsed_path) >= 3
}

# --- tokens -----------------------------------------------------------------------------------

bearer(value) := token if {
	parts := split(value, " ")
	count(parts) == 2
	lower(parts[0]) == "bearer"
	token := parts[1]
}

bearer(value) := value if {
	count(split(value, " ")) == 1
}

# The claims of `token` once it verifies for `audience` against its issuer's keys.
verified(token, audience) := claims if {
	[_, unverified, _] := io.jwt.decode(token)
	keys := data.kaos.jwks[unverified.iss]
	some alg in algorithms
	[valid, _, claims] := io.jwt.decode_verify(token, {
		"alg": alg,
		"aud": audience,
		"iss": unverified.iss,
		"cert": json.marshal(keys),
	})
	valid
}

actor_header := headers["x-agent-authorization"]

has_actor if actor_header != ""

subject_token := bearer(headers.authorization)

actor_claims := verified(bearer(actor_header), agent_audience)

# An Agent of the data whose token these claims are (its ServiceAccount subject or OIDC client).
is_agent(facts, claims) if facts.issuer_sub == claims.sub

is_agent(facts, claims) if facts.issuer_azp == claims.azp

actor := id if {
	some id
	is_agent(data.kaos.agents[id], actor_claims)
}

# Without an agents map the token's subject is the Agent's id itself.
actor := actor_claims.sub if {
	actor_claims.sub
	not data.kaos.agents
}

# --- subjects ---------------------------------------------------------------------------------

principal(claims) := claims.email if claims.email != ""

principal(claims) := claims.sub if {
	object.get(claims, "email", "") == ""
	claims.sub != ""
}

user := {"keys": keys} if {
	claims := verified(subject_token, data.kaos.user.audience)
	claims.iss == data.kaos.user.issuer
	groups := [sprintf("group:%v", [g]) | some g in object.get(claims, "groups", [])]
	keys := array.concat([sprintf("user:%v", [principal(claims)])], groups)
}

autonomous_subject if {
	claims := verified(subject_token, agent_audience)
	some id
	is_agent(data.kaos.agents[id], claims)
	data.kaos.agents[id].autonomous == true
}

valid_subject if user

valid_subject if autonomous_subject

user_may_enter if {
	some key in user.keys
	target in data.kaos.user_grants[key]
}

delegated_egress if {
	has_actor
	actor
	not target
	claims := verified(subject_token, exchange_audience)
	claims.iss == data.kaos.user.issuer
	claims.sub != ""
	claims.azp == data.kaos.agents[actor].issuer_azp
}

# --- reasons ----------------------------------------------------------------------------------

allow contains sprintf("actor %v may reach %v for a verified subject", [actor, target]) if {
	has_actor
	target in data.kaos.grants[actor]
	valid_subject
}

allow contains sprintf("user subject may reach %v", [target]) if {
	not has_actor
	user_may_enter
}

allow contains sprintf("actor %v may perform delegated third-party egress", [actor]) if delegated_egress

deny contains "missing or invalid actor token" if {
	has_actor
	not actor
}

deny contains "request declares no target resource" if {
	has_actor
	actor
	not target
	not delegated_egress
}

deny contains sprintf("actor %v is not granted %v", [actor, target]) if {
	has_actor
	actor
	target
	not target in data.kaos.grants[actor]
}

deny contains "subject missing or invalid" if {
	has_actor
	not valid_subject
	not delegated_egress
}

deny contains "no user subject at entry" if {
	not has_actor
	not user
}

deny contains "request declares no target resource" if {
	not has_actor
	user
	not target
}

deny contains "user is not granted target resource" if {
	not has_actor
	user
	target
	not user_may_enter
}

# --- the decision -----------------------------------------------------------------------------

default result := {"allowed": false, "action": "deny", "reasons": ["no policy rule matched"]}

result := {"allowed": false, "action": "deny", "reasons": sort([r | some r in deny])} if count(deny) > 0

result := {"allowed": true, "action": "allow", "reasons": sort([r | some r in allow])} if {
	count(deny) == 0
	count(allow) > 0
}
