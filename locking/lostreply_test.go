package locking

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// lostReplies runs every script for real, but while armed it loses the reply of the next
// one: the caller sees errReply (a timeout by default) although the script ran in Redis.
// before, when set, runs after that script and before the caller sees the error.
type lostReplies struct {
	*redis.Client
	armed    atomic.Bool
	errReply error
	before   func()
}

func (l *lostReplies) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := l.Client.EvalSha(ctx, sha, keys, args...)
	if cmd.Err() == nil && l.armed.CompareAndSwap(true, false) {
		if l.before != nil {
			l.before()
		}
		lost := redis.NewCmd(ctx)
		if l.errReply != nil {
			lost.SetErr(l.errReply)
		} else {
			lost.SetErr(context.DeadlineExceeded)
		}
		return lost
	}
	return cmd
}
