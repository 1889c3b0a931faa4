package postgres

// PruneQuery is pruneQuery, for the plan test.
var PruneQuery = pruneQuery
