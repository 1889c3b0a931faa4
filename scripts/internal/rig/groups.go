package rig

import (
	"context"
	"fmt"
)

// A group of hosts (docs/api.md, "Groups") has its own id, g_…, its own
// sources each with a mode ("fanout": a delivery for every member; "any":
// one delivery held by one online member at a time), and ordered members.
// Its webhooks go to WebhookURL(cloudURL, groupID, source).

// GroupInfo is a group as GET /api/groups/:id shows it.
type GroupInfo struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Members []struct {
		HostID   string `json:"host_id"`
		Presence string `json:"presence"`
		Position int    `json:"position"`
	} `json:"members"`
}

// CreateGroup creates a group with no members and returns its id.
func (a *Admin) CreateGroup(ctx context.Context, name string) (string, error) {
	var g GroupInfo
	if err := a.Do(ctx, "POST", "/api/groups", map[string]string{"name": name}, &g); err != nil {
		return "", err
	}
	if g.ID == "" {
		return "", fmt.Errorf("rig: POST /api/groups answered no id")
	}
	return g.ID, nil
}

// AddMember makes a host a member of a group, after the last.
func (a *Admin) AddMember(ctx context.Context, groupID, hostID string) error {
	return a.Do(ctx, "PUT", "/api/groups/"+groupID+"/members/"+hostID, map[string]any{}, nil)
}

// RemoveMember takes a host out of a group and returns how many of the
// group's fanout deliveries it held unfinished were cancelled.
func (a *Admin) RemoveMember(ctx context.Context, groupID, hostID string) (int, error) {
	var out struct {
		Cancelled int `json:"cancelled"`
	}
	err := a.Do(ctx, "DELETE", "/api/groups/"+groupID+"/members/"+hostID, nil, &out)
	return out.Cancelled, err
}

// PutGroupSource configures (replaces) a group's source; spec is the body
// of PUT /api/groups/:id/sources/:source, with its required "mode"
// (fanout or any) beside a host's source's fields.
func (a *Admin) PutGroupSource(ctx context.Context, groupID, source string, spec map[string]any) error {
	return a.Do(ctx, "PUT", "/api/groups/"+groupID+"/sources/"+source, spec, nil)
}

// Group reads one group with its members.
func (a *Admin) Group(ctx context.Context, groupID string) (GroupInfo, error) {
	var g GroupInfo
	err := a.Do(ctx, "GET", "/api/groups/"+groupID, nil, &g)
	return g, err
}

// DeactivateGroup stops a group's URLs taking webhooks.
func (a *Admin) DeactivateGroup(ctx context.Context, groupID string) error {
	return a.Do(ctx, "POST", "/api/groups/"+groupID+"/deactivate", nil, nil)
}

// NewGroup creates a group of name with members, in order, and returns
// its id; its sources are the caller's (PutGroupSource).
func (a *Admin) NewGroup(ctx context.Context, name string, members ...string) (string, error) {
	id, err := a.CreateGroup(ctx, name)
	if err != nil {
		return "", err
	}
	for _, m := range members {
		if err := a.AddMember(ctx, id, m); err != nil {
			return "", err
		}
	}
	return id, nil
}
