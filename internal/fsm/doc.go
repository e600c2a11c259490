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
//	func (w *Writer) become(to WriterState) {
//		if !writerEdges.Legal(w.state, to) {
//			panic(panicOnAssert.Fail(fsm.Illegal(ErrIllegalTransition, "writer", w.state, to)))
//		}
//		w.state = to
//	}
//
// A state with no entry (or an empty one) is final. What a component does with an illegal
// edge is its own choice (panic, log, or return the error); Illegal only builds the error,
// so that each one names the component and the edge the same way.
//
// Goroutines: none. Edges is read-only after initialisation and safe for concurrent reads.
package fsm
