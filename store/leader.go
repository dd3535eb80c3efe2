package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/jspub"
)

// lastFromLeader reads key's last value in the KV bucket from the stream's
// leader, never from a replica that may be behind: a KV get is a direct get,
// which any replica of an R3 bucket may answer with what it has so far.
// Reads that decide right after a write (of this sagad or another) use it.
// A key never written, deleted, purged or expired is ErrNotFound. The read
// has its own deadline (w's timeout, or the default).
func lastFromLeader(ctx context.Context, js jetstream.JetStream, w *jspub.Writes, bucket, key string) ([]byte, uint64, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	if err != nil {
		return nil, 0, err
	}
	rctx, cancel := readCtx(ctx, w)
	m, err := js.Conn().RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	cancel()
	if err != nil {
		return nil, 0, fmt.Errorf("from the leader: %w", err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, 0, fmt.Errorf("from the leader: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound) {
			return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return nil, 0, fmt.Errorf("from the leader: %s", resp.Error.Description)
	}
	if resp.Message == nil {
		return nil, 0, fmt.Errorf("from the leader: empty answer")
	}
	if len(resp.Message.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Hdrs)
		if err != nil {
			return nil, 0, fmt.Errorf("from the leader: %w", err)
		}
		// A delete, a purge or the marker of an expired entry: no value.
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" || h.Get("Nats-Marker-Reason") != "" {
			return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
	}
	return resp.Message.Data, resp.Message.Seq, nil
}
