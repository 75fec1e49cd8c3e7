#if canImport(SwiftUI)
    import AbrovaSync
    import ShoppingCartExample
    import SwiftUI

    /// The example app: one cart, a sync-status bar with the pending count, and a banner when the
    /// server refused a queued write. (Apple platforms only: not built on Linux; iOS 17 / macOS 14
    /// and later, for Observation.)
    @main
    struct ShoppingCartApp: App {
        @State private var model: CartModel

        init() {
            let config = try! AbrovaSyncConfigBuilder(apiKey: "YOUR_API_KEY")
                .serverURL(URL(string: "https://sync.example.com")!)
                .authToken("YOUR_TOKEN")
                .build()
            _model = State(initialValue: CartModel(sync: try! AbrovaSync.initialize(config: config), cartID: "groceries"))
        }

        var body: some Scene {
            WindowGroup { CartView(model: model).task { try? await model.start() } }
        }
    }

    struct CartView: View {
        let model: CartModel
        @State private var newItem = ""

        var body: some View {
            VStack(spacing: 0) {
                if let rejection = model.rejection {
                    Button(rejection) { model.dismissRejection() }
                        .frame(maxWidth: .infinity).padding(8).background(.red.opacity(0.2))
                }
                List {
                    ForEach(model.lines) { line in
                        Stepper(
                            "\(line.item): \(line.quantity)",
                            onIncrement: { Task { try? await model.change(line.item, by: 1) } },
                            onDecrement: { Task { try? await model.change(line.item, by: -1) } })
                    }
                    HStack {
                        TextField("Item", text: $newItem)
                        Button("Add") {
                            let item = newItem
                            newItem = ""
                            Task { try? await model.add(item) }
                        }
                    }
                }
                HStack {
                    Text("\(model.syncState)")
                    Spacer()
                    Text(model.pendingCount == 0 ? "All synced" : "\(model.pendingCount) waiting")
                }
                .font(.footnote).padding(8)
            }
        }
    }
#endif
