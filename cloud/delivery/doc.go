// Package delivery is the cloud's delivery core: the retry policy and the
// decision of every failed attempt. The store runs what the core decides:
// a failed attempt's Failure is built here (Fail, through the params
// constructors NackParams, ReleaseParams, …) and applied by the engine with
// one update guarded on the transition's From.
package delivery
