package inventory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/stockguard/stockguard/inventory"
	"github.com/stockguard/stockguard/models"
)

// A purchase with the guard strategy, its idempotent replay, and a purchase the stock cannot
// cover.
func ExampleService_Purchase() {
	ctx := context.Background()
	db, err := models.Open(ctx, ":memory:")
	if err != nil {
		panic(err)
	}
	defer models.Close(db)
	svc, err := inventory.NewService(inventory.Config{DB: db, Default: inventory.StrategyGuard})
	if err != nil {
		panic(err)
	}
	if err := svc.Reset(ctx, []inventory.NewItem{{SKU: "TEE", Name: "T-shirt", Stock: 5, PriceCents: 1999}}); err != nil {
		panic(err)
	}
	items, _ := svc.ListItems(ctx)
	id := items[0].ID

	req := inventory.PurchaseRequest{ItemID: id, Quantity: 2, IdempotencyKey: "order-42"}
	rec, _ := svc.Purchase(ctx, req)
	fmt.Printf("order %d: %d bought, %d left, replayed=%v\n", rec.OrderID, rec.Quantity, rec.Remaining, rec.Replayed)
	rec, _ = svc.Purchase(ctx, req) // the client retries: same answer, nothing sold twice
	fmt.Printf("order %d: %d bought, %d left, replayed=%v\n", rec.OrderID, rec.Quantity, rec.Remaining, rec.Replayed)

	_, err = svc.Purchase(ctx, inventory.PurchaseRequest{ItemID: id, Quantity: 4})
	fmt.Println(errors.Is(err, inventory.ErrInsufficientStock), err)
	// Output:
	// order 1: 2 bought, 3 left, replayed=false
	// order 1: 2 bought, 3 left, replayed=true
	// true insufficient stock: item 1 has 3 left, 4 asked
}
