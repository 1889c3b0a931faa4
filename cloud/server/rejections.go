package server

import (
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

type rejectionJSON struct {
	ID          int64     `json:"id"`
	At          time.Time `json:"at"`
	Source      string    `json:"source"`
	Status      int       `json:"status"`
	Reason      string    `json:"reason"`
	ClientIP    string    `json:"client_ip"`
	HeaderNames []string  `json:"header_names"`
}

type rejectionsResponse struct {
	Rejections []rejectionJSON `json:"rejections"`
	NextCursor string          `json:"next_cursor,omitempty"`
}

// listRejections answers GET /api/hosts/:id/rejections: the host's refused
// intake requests (401, 413, 429), newest first; `limit` (1..500, default
// 100) and `cursor` (from next_cursor).
func (s *Server) listRejections(c *gin.Context) {
	ctx := c.Request.Context()
	hostID := c.Param("id")
	limit, before, err := queryIDPage(c, 100, 500)
	if err != nil {
		s.writeError(c, err)
		return
	}
	if _, err := s.store.HostGet(ctx, hostID); err != nil {
		s.writeError(c, hostErr(err))
		return
	}
	// One more than the page says whether there is a next page.
	rs, err := s.store.RejectionList(ctx, &store.RejectionListParams{HostID: hostID, Limit: limit + 1, BeforeID: before})
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := rejectionsResponse{}
	if len(rs) > limit {
		rs = rs[:limit]
		out.NextCursor = strconv.FormatInt(rs[len(rs)-1].ID, 10)
	}
	out.Rejections = make([]rejectionJSON, 0, len(rs))
	for _, r := range rs {
		out.Rejections = append(out.Rejections, rejectionJSON{
			ID: r.ID, At: r.At, Source: r.Source, Status: r.Status, Reason: r.Reason,
			ClientIP: r.ClientIP, HeaderNames: store.OrEmpty(r.HeaderNames),
		})
	}
	c.JSON(200, out)
}

// queryIDPage parses the `limit` (as queryLimit) and `cursor` query
// parameters of a page ordered by id, newest first: the cursor is 0 when
// absent, else the positive id the page before returned as next_cursor.
func queryIDPage(c *gin.Context, def, max int) (limit int, before int64, err error) {
	limit, err = queryLimit(c, def, max)
	if err != nil {
		return 0, 0, err
	}
	cur := c.Query("cursor")
	if cur == "" {
		return limit, 0, nil
	}
	before, err = strconv.ParseInt(cur, 10, 64)
	if err != nil || before <= 0 {
		return 0, 0, shared.Invalid("cursor: not a value this API returned")
	}
	return limit, before, nil
}

// queryLimit parses the `limit` query parameter: def when absent, else an
// integer in 1..max.
func queryLimit(c *gin.Context, def, max int) (int, error) {
	v := c.Query("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, shared.Invalid("limit: want an integer from 1 to " + strconv.Itoa(max))
	}
	return n, nil
}
