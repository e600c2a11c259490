// Package fsm declares the legal state edges of the owner-loop state machines.
//
// Every stateful component has a named state type and moves between states only in its
// become… methods, which reject edges the state diagram does not have. The diagram is
// declared once, as data next to the states:
//
//	var writerEdges = fsm.Edges[WriterState]{
//		WriterOpen:    {WriterDraining, WriterClosing, WriterFenced, WriterFailed},
//		WriterClosing: {WriterClosed, WriterFenced, WriterFailed},
//	}
//
//	func (t *Topic) become(to State) error {
//		if !topicEdges.Legal(t.state, to) {
//			return fsm.Illegal(ErrIllegalTransition, "topic "+t.name, t.state, to)
//		}
//		t.state = to
//		return nil
//	}
//
// A state with no entry (or an empty one) is final. What a component does with an illegal
// edge is its own choice (log and return the error, or report it as an assertion); Illegal
// only builds the error, so that each one names the component and the edge the same way.
// Must is the choice of the pure cores, for which an illegal edge is a bug that must not go
// on: it panics.
//
//	func (w *Writer) become(to WriterState) {
//		w.state = writerEdges.Must(ErrIllegalTransition, "writer", w.state, to)
//	}
//
// Goroutines: none. Edges is read-only after initialisation and safe for concurrent reads.
package fsm
